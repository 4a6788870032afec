# /// script
# requires-python = ">=3.9"
# dependencies = ["pyyaml", "Pillow>=10; python_version >= '3.8'"]
# ///
import yaml
