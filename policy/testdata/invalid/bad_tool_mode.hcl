# want: bad_tool_mode.hcl:3: daemon.tool_mode: unknown value "allow": choose one of restrict, preapprove
daemon {
  tool_mode = "allow"
}
