"""Write a .docx with python-docx, convert it to PDF with LibreOffice
headless, render its first page with pdftoppm and extract its text with
pdftotext. Results go to outputs/."""
import os
import subprocess
import sys

import docx

os.makedirs("outputs", exist_ok=True)
doc = docx.Document()
doc.add_heading("Quarterly report", 0)
doc.add_paragraph("Converted by soffice inside the sandbox.")
doc.save("report.docx")

# LibreOffice keeps its user profile under $HOME; the sandbox's /tmp is the
# writable place for it (the image itself is read-only).
env = dict(os.environ, HOME="/tmp")
r = subprocess.run(
    ["soffice", "--headless", "--convert-to", "pdf", "--outdir", "outputs", "report.docx"],
    env=env, capture_output=True, text=True, timeout=240)
print("soffice exit", r.returncode)
if r.returncode != 0 or not os.path.exists("outputs/report.pdf"):
    print(r.stdout, r.stderr, file=sys.stderr)
    sys.exit(1)

subprocess.run(["pdftoppm", "-png", "-r", "40", "-f", "1", "-l", "1", "outputs/report.pdf", "outputs/page"], check=True)
text = subprocess.run(["pdftotext", "outputs/report.pdf", "-"], check=True, capture_output=True, text=True).stdout
print("pdf text:", " ".join(text.split()))
print("outputs:", " ".join(sorted(os.listdir("outputs"))))
