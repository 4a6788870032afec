import os
import sys

n = int(sys.argv[1])
d = sys.argv[2] if len(sys.argv) > 2 else "many"
os.makedirs(d, exist_ok=True)
for i in range(n):
    with open(os.path.join(d, "f%05d.txt" % i), "w") as f:
        f.write("file %d\n" % i)
print("wrote %d files" % n)
