import sys

from scripts.utils import helper

print(helper())
print("args=" + "|".join(sys.argv[1:]))
