"""Text rules of single languages that the shared reader (text.py) and the data files cannot say:
number words from CLDR for languages num2words lacks (spellout.py)."""
