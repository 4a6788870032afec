# The python image runs .py scripts: python3 plus the libraries that document
# and data skills import, all as Debian 12 packages (no pip at build or run
# time, so the image comes from Debian's signed archive alone).
image "python" {
  suite   = "bookworm"
  mirror  = "http://deb.debian.org/debian"
  variant = "essential"
  sources = [
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
  ]
  packages = [
    "ca-certificates",
    "poppler-utils",
    "python3",
    "python3-defusedxml",
    "python3-docx",
    "python3-imageio",
    "python3-lxml",
    "python3-numpy",
    "python3-openpyxl",
    "python3-pandas",
    "python3-pdfminer",
    "python3-pil",
    "python3-pypdf",
    "python3-yaml",
    "python-is-python3",
    "qpdf",
  ]
  interpreters = ["python3", "python"]
  notes        = <<-EOT
    Python 3.11 with yaml, lxml, openpyxl, pypdf (3.4), PIL, defusedxml, numpy,
    pandas, python-docx, imageio and pdfminer.six, plus poppler-utils
    (pdftotext, pdftoppm) and qpdf. Debian 12 packages neither pdfplumber nor
    pdf2image: scripts that import them fail; pdfminer.six (which pdfplumber
    wraps) and poppler's pdftoppm (which pdf2image wraps) are here instead.
    python-is-python3 provides the "python" command for old shebangs.
  EOT
}
