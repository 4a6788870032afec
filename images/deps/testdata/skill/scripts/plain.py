print("no metadata")
