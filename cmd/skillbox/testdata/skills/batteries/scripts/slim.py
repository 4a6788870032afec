"""What the python-slim image holds: the document libraries, no office suite."""
import json
import shutil

import docx  # noqa: F401
import openpyxl  # noqa: F401
import pypdf

print(json.dumps({"pypdf": pypdf.__version__, "soffice": shutil.which("soffice") is not None,
                  "pdftoppm": shutil.which("pdftoppm") is not None}, sort_keys=True))
