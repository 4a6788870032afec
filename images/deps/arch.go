package deps

import goruntime "runtime"

func goarch() string { return goruntime.GOARCH }
