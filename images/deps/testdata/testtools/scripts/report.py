import json
import yaml
from pathlib import Path
print(json.dumps(yaml.safe_load(Path("in.yaml").read_text())))
