# The python-slim image is the small Python image: python3 with the document
# libraries alone, no office suite, media tools or fonts. Operators select it
# for .py scripts with image "python" { recipe = "python-slim" } in the config.
image "python-slim" {
  suite = "trixie" # with trixie-updates and trixie-security
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
    Python 3.13 with yaml, lxml, openpyxl, pypdf (5.x), Pillow, defusedxml,
    numpy, pandas, python-docx, imageio and pdfminer.six, plus poppler-utils
    (pdftotext, pdftoppm) and qpdf. No LibreOffice, pandoc, ffmpeg, git,
    matplotlib or reportlab: use the python image for those.
  EOT
}
