def helper():
    return "helped by scripts.utils"
