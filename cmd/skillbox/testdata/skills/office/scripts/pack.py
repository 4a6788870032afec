import os
import sys
import zipfile

src, dst = sys.argv[1], sys.argv[2]
names = []
for root, dirs, files in os.walk(src):
    for f in files:
        names.append(os.path.relpath(os.path.join(root, f), src))
# [Content_Types].xml comes first in an OOXML package.
names.sort(key=lambda n: (n != "[Content_Types].xml", n))
with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
    for n in names:
        z.write(os.path.join(src, n), n)
print("packed %d parts into %s" % (len(names), dst))
