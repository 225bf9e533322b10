"""Text rules of single languages that the shared reader (text.py) and data files cannot say:
Japanese (ja.py), Korean (ko.py), and number words from CLDR for languages num2words lacks
(spellout.py); registry.py picks a language's own reading. docs/languages.md says what each reads."""
