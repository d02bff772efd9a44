"""What every concern of the domain shares: errors, versions, references and the
rules for untrusted text. Imports nothing else of the domain.
"""
