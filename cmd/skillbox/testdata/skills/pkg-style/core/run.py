import engine  # a sibling module: the script's own directory is on the path
from core.engine import render  # the skill as a package: the skill root is on the path

print(render(3))
print(engine.render(1))
