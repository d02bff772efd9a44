"""Pure domain code: versions, release models, the target policy, the error tree and the ports.

Nothing here performs I/O, reads the clock or imports a third-party SDK (an import-linter
contract enforces the latter), so every rule of what to build is testable in isolation.
"""
