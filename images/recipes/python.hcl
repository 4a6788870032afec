# The python image runs .py scripts. It is "batteries included", like the
# hosted code-execution environments skills are written for: Python 3 with the
# document, data and imaging libraries, and the command-line tools skill
# scripts call (poppler, qpdf, pandoc, LibreOffice headless, ffmpeg, git), all
# as Debian 13 packages: no pip at build or run time, so the image comes from
# Debian's signed archive alone. python-slim is the small alternative.
image "python" {
  suite = "trixie" # with trixie-updates and trixie-security
  packages = [
    "ca-certificates",
    "python3",
    "python-is-python3",
    "python3-defusedxml",
    "python3-docx",
    "python3-imageio",
    "python3-lxml",
    "python3-matplotlib",
    "python3-numpy",
    "python3-openpyxl",
    "python3-pandas",
    "python3-pdfminer",
    "python3-pil",
    "python3-pypdf",
    "python3-reportlab",
    "python3-yaml",
    # What skill scripts import most after the standard library, by count
    # over public skill collections: HTTP, parsing, templating, CLI and
    # data helpers.
    "python3-aiohttp",
    "python3-bs4",
    "python3-chardet",
    "python3-click",
    "python3-cryptography",
    "python3-dateutil",
    "python3-dotenv",
    "python3-html2text",
    "python3-httpx",
    "python3-jinja2",
    "python3-jsonschema",
    "python3-markdown",
    "python3-pydantic",
    "python3-pytest",
    "python3-requests",
    "python3-rich",
    "python3-seaborn",
    "python3-sklearn",
    "python3-tabulate",
    "python3-tqdm",
    "python3-xlrd",
    "python3-xlsxwriter",
    "poppler-utils",
    "qpdf",
    "pandoc",
    "libreoffice-writer-nogui",
    "libreoffice-calc-nogui",
    "libreoffice-impress-nogui",
    "ffmpeg",
    "git",
    "fonts-dejavu-core",
    "fonts-liberation",
    "fonts-noto-core",
  ]
  interpreters = ["python3", "python"]
  # What hosted code interpreters ship and Debian does not: installed as a
  # dependency layer (wheels only, offline, hashes recorded) when the config
  # names a python_index; reported as missing otherwise.
  python_extras = ["python-pptx", "pdfplumber", "pdf2image", "pypdfium2", "markitdown"]
  notes        = <<-EOT
    Python 3.13 with pypdf (5.x), openpyxl, python-docx, lxml, defusedxml,
    Pillow, numpy, pandas, matplotlib (and scipy, which it pulls in),
    reportlab, imageio, PyYAML and pdfminer.six; requests, httpx, aiohttp,
    BeautifulSoup, Jinja2, Markdown, jsonschema, pydantic, click, rich, tqdm,
    python-dotenv, dateutil, chardet, cryptography, tabulate, html2text,
    XlsxWriter, xlrd, seaborn, scikit-learn and pytest; poppler-utils (pdftoppm,
    pdftotext), qpdf, pandoc, LibreOffice headless (soffice: Writer, Calc,
    Impress, no GUI), ffmpeg, git, and the DejaVu, Liberation and Noto fonts.
    LibreOffice keeps its profile under $HOME, which must be writable (the
    sandbox's /tmp). Debian packages neither python-pptx, pdfplumber nor
    pdf2image: scripts that import them fail; pdfminer.six (which pdfplumber
    wraps) and pdftoppm (which pdf2image wraps) are here instead.
    python-is-python3 provides the "python" command for old shebangs.
  EOT
}
