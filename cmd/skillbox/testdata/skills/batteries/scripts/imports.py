"""Import every library the batteries-included image promises, check the
command-line tools and fonts are there, and that pypdf is 5 or newer.
Prints one line per check; exits 1 if any fails."""
import importlib
import json
import os
import shutil
import socket
import sys

failed = []
modules = ["pypdf", "openpyxl", "docx", "lxml", "defusedxml", "PIL", "numpy", "pandas",
           "matplotlib", "reportlab", "imageio", "yaml", "pdfminer",
           "requests", "httpx", "aiohttp", "bs4", "jinja2", "markdown", "jsonschema",
           "pydantic", "click", "rich", "tqdm", "dotenv", "dateutil", "chardet",
           "cryptography", "tabulate", "html2text", "xlsxwriter", "xlrd", "seaborn",
           "sklearn", "pytest"]
versions = {}
for m in modules:
    try:
        mod = importlib.import_module(m)
        versions[m] = str(getattr(mod, "__version__", "?"))
    except Exception as e:  # report every failure, not only the first
        failed.append(f"import {m}: {e}")

import pypdf  # noqa: E402

major = int(pypdf.__version__.split(".")[0])
if major < 5:
    failed.append(f"pypdf {pypdf.__version__} < 5")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

os.makedirs("outputs", exist_ok=True)
plt.plot([1, 2, 3], [1, 4, 9])
plt.savefig("outputs/plot.png")

tools = ["pdftoppm", "pdftotext", "qpdf", "pandoc", "soffice", "ffmpeg", "git"]
for t in tools:
    if shutil.which(t) is None:
        failed.append(f"{t} not on PATH")
for d in ["dejavu", "liberation", "noto"]:
    if not os.path.isdir(f"/usr/share/fonts/truetype/{d}"):
        failed.append(f"fonts: /usr/share/fonts/truetype/{d} missing")
try:
    socket.getaddrinfo("localhost", 80)
except OSError as e:
    failed.append(f"localhost does not resolve: {e}")

print(json.dumps({"python": sys.version.split()[0], "versions": versions, "failed": failed}, sort_keys=True))
sys.exit(1 if failed else 0)
