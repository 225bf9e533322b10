"""`make bench`: the serving benchmark (not a test). See bench/run.py."""
