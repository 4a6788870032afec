import sys
import zipfile

src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z:
    z.extractall(dst)
    n = len(z.namelist())
print("unpacked %d parts into %s" % (n, dst))
