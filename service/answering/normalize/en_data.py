"""English normalization's tables: month names, street types, US states, currencies' names beside
num2words's, time zones, the periods of a price (`$20/mo`), the pieces of an address or a URL."""
from __future__ import annotations

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
# written (lower case, without its full stop) -> month number
MONTH_FORMS = {**{m: i + 1 for i, m in enumerate(MONTHS)},
               **{m[:3]: i + 1 for i, m in enumerate(MONTHS) if m != "may"}, "sept": 9}

# a street type as written (lower case, no full stop) -> as read
STREETS = {"st": "street", "street": "street", "ave": "avenue", "av": "avenue", "avenue": "avenue", "rd": "road",
           "road": "road", "blvd": "boulevard", "boulevard": "boulevard", "dr": "drive", "drive": "drive",
           "ln": "lane", "lane": "lane", "ct": "court", "court": "court", "expy": "expressway",
           "hwy": "highway", "highway": "highway", "pkwy": "parkway", "parkway": "parkway", "pl": "place",
           "place": "place", "sq": "square", "square": "square", "ter": "terrace", "terr": "terrace",
           "way": "way", "cir": "circle", "circle": "circle", "fwy": "freeway", "trl": "trail", "aly": "alley"}
DIRECTIONS = {"n": "North", "s": "South", "e": "East", "w": "West", "ne": "Northeast", "nw": "Northwest",
              "se": "Southeast", "sw": "Southwest", "north": "North", "south": "South", "east": "East",
              "west": "West"}
STATES = {"AL": "Alabama", "AK": "Alaska", "AZ": "Arizona", "AR": "Arkansas", "CA": "California",
          "CO": "Colorado", "CT": "Connecticut", "DE": "Delaware", "FL": "Florida", "GA": "Georgia",
          "HI": "Hawaii", "ID": "Idaho", "IL": "Illinois", "IN": "Indiana", "IA": "Iowa", "KS": "Kansas",
          "KY": "Kentucky", "LA": "Louisiana", "ME": "Maine", "MD": "Maryland", "MA": "Massachusetts",
          "MI": "Michigan", "MN": "Minnesota", "MS": "Mississippi", "MO": "Missouri", "MT": "Montana",
          "NE": "Nebraska", "NV": "Nevada", "NH": "New Hampshire", "NJ": "New Jersey", "NM": "New Mexico",
          "NY": "New York", "NC": "North Carolina", "ND": "North Dakota", "OH": "Ohio", "OK": "Oklahoma",
          "OR": "Oregon", "PA": "Pennsylvania", "RI": "Rhode Island", "SC": "South Carolina",
          "SD": "South Dakota", "TN": "Tennessee", "TX": "Texas", "UT": "Utah", "VT": "Vermont",
          "VA": "Virginia", "WA": "Washington", "WV": "West Virginia", "WI": "Wisconsin", "WY": "Wyoming",
          "DC": "D C"}

# a currency sign -> ISO 4217 code, beside the data file's (textdata/en.tsv)
SIGNS = {"₩": "KRW", "₹": "INR", "₽": "RUB", "₺": "TRY", "₪": "ILS", "₦": "NGN", "₱": "PHP", "฿": "THB",
         "₫": "VND", "US$": "USD", "C$": "CAD", "A$": "AUD", "€": "EUR", "£": "GBP", "¥": "JPY", "$": "USD"}
# code -> (one, many, minor one, minor many); num2words's names come first where it has the code
CURRENCIES = {"GBP": ("pound", "pounds", "penny", "pence"), "JPY": ("yen", "yen", "sen", "sen"), "KRW": ("won", "won", "jeon", "jeon"),
              "CNY": ("yuan", "yuan", "fen", "fen"), "TRY": ("lira", "liras", "kurus", "kurus"),
              "ILS": ("shekel", "shekels", "agora", "agorot"), "NGN": ("naira", "naira", "kobo", "kobo"),
              "PHP": ("peso", "pesos", "centavo", "centavos"), "THB": ("baht", "baht", "satang", "satang"),
              "VND": ("dong", "dong", "xu", "xu")}
SCALES = {"thousand": "thousand", "k": "thousand", "million": "million", "m": "million", "mn": "million",
          "billion": "billion", "bn": "billion", "b": "billion", "trillion": "trillion", "tn": "trillion"}
# what a price is per (`$20/mo`, `£10/wk`)
PERIODS = {"mo": "month", "month": "month", "yr": "year", "y": "year", "year": "year", "wk": "week",
           "week": "week", "d": "day", "day": "day", "hr": "hour", "h": "hour", "hour": "hour", "min": "minute",
           "night": "night", "person": "person", "kg": "kilogram", "lb": "pound", "unit": "unit"}

ZONES = ("est", "edt", "cst", "cdt", "mst", "mdt", "pst", "pdt", "akst", "hst", "gmt", "utc", "bst", "cet",
         "cest", "ist", "jst", "aest")

# a URL's or an e-mail address's signs, read aloud
URL_SIGNS = {".": "dot", "@": "at", "/": "slash", "-": "dash", "_": "underscore", ":": "colon", "&": "ampersand",
             "~": "tilde", "#": "hash", "?": "question mark", "=": "equals", "%": "percent", "+": "plus"}
# a URL's pieces read as words, not spelled: the common top-level domains and file types
URL_WORDS = {"com": "com", "org": "org", "net": "net", "edu": "edu", "gov": "gov", "info": "info", "jpg": "jpeg",
             "jpeg": "jpeg", "png": "png", "gif": "gif", "pdf": "pdf", "file": "file", "mail": "mail"}
URL_SPELLED = {"www", "http", "https", "ftp", "html", "htm", "php", "xml"}  # spelled wherever they are
TLDS = ("com", "org", "net", "edu", "gov", "io", "ai", "co", "uk", "de", "fr", "it", "us", "ca", "info", "biz")
