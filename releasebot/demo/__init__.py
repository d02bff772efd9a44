"""``releasebot demo``'s own inputs: its feeds and simulated fleet (data files), and the build
history it simulates for the page (``history``)."""
