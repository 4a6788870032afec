# want: mktemp:7 pdfinfo:12 awk:12 qpdf:16 pdftotext:19 soffice:25 pandoc:31 basename:35
#!/usr/bin/env bash
# Summarise a PDF: page count, structure check, text, and a DOCX via LibreOffice.
set -euo pipefail

IN="${1:?usage: pdf-report.sh FILE.pdf}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

log() { printf '%s\n' "$*" >&2; }

pages=$(pdfinfo "$IN" | awk '/^Pages:/ {print $2}')
log "pages: $pages"

# qpdf exits 2 on errors, 3 on warnings
if ! qpdf --check "$IN" >/dev/null 2>&1; then
  log "qpdf found problems"
fi
pdftotext -layout "$IN" "$OUT/text.txt"

case "${FORMAT:-docx}" in
  docx|odt)
    # soffice writes next to --outdir
    cd "$OUT"
    soffice --headless --convert-to "${FORMAT:-docx}" "$IN" >/dev/null
    ;;
  *)
    log "unknown format"
    ;;
esac
pandoc -f markdown -t plain <<'MD' > "$OUT/notes.txt"
# Notes
Run `rm -rf /` never; pdfinfo lines here are text.
MD
echo "done: $(basename "$IN")"
