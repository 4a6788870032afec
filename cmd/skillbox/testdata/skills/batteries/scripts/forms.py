"""Make a fillable PDF with reportlab's AcroForm support, read its fields
with pypdf, fill them, and read the filled copy back. Prints one JSON line."""
import json
import os

from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

os.makedirs("outputs", exist_ok=True)
c = canvas.Canvas("outputs/form.pdf", pagesize=A4)
c.drawString(72, 780, "Application form")
c.acroForm.textfield(name="applicant", tooltip="Name", x=72, y=700, width=300, height=20)
c.acroForm.textfield(name="city", tooltip="City", x=72, y=660, width=300, height=20, value="Paris")
c.acroForm.checkbox(name="agree", x=72, y=620, buttonStyle="check")
c.save()

reader = PdfReader("outputs/form.pdf")
before = {k: str(v.get("/V", "")) for k, v in reader.get_fields().items()}
text_fields = sorted(reader.get_form_text_fields())

writer = PdfWriter(clone_from=reader)
writer.set_need_appearances_writer(True)
writer.update_page_form_field_values(
    writer.pages[0], {"applicant": "Ada Lovelace", "city": "London", "agree": "/Yes"}, auto_regenerate=False)
with open("outputs/filled.pdf", "wb") as f:
    writer.write(f)

after = {k: str(v.get("/V", "")) for k, v in PdfReader("outputs/filled.pdf").get_fields().items()}
print(json.dumps({"before": before, "text_fields": text_fields, "after": after}, sort_keys=True))
