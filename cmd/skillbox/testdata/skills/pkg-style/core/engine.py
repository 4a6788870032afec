def render(n):
    return "core engine rendered %d frames" % n
