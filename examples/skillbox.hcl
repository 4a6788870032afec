# skillbox.hcl — example configuration. Check it with:
#   skillbox policy check examples/skillbox.hcl
# Unknown keys are errors. Commented settings show their defaults.

daemon {
  socket    = "/run/skillbox/skillbox.sock"
  state_dir = "/var/lib/skillbox"
  audit_dir = "/var/log/skillbox"
  approvers = ["root"]          # users (names or uids) allowed to approve confirmations
  # replica = "skillbox-0"      # this daemon's name among replicas: in every audit record, and its
                                # audit chain is then audit_dir/<replica>/ (default: the host name,
                                # chain in audit_dir itself)

  # socket_mode         = "0660"      # octal, quoted
  # socket_group        = "skillbox"  # group owning the socket (default: unchanged)
  # max_connections     = 64
  # max_concurrent_runs = 4
  # max_active_skills   = 8           # skills loaded at once per session
  # run_queue_timeout   = "30s"       # how long a run waits for a free slot
  # idle_timeout        = "30m"       # idle client connections are closed after this
  # max_line_bytes      = "4MiB"      # largest JSON-RPC request line
  # confirmation_ttl    = "10m"       # approvals expire after this
  # runtime             = "runsc"     # runsc | runc | containerd
  # tool_mode           = "restrict"  # restrict | preapprove (meaning of a skill's allowed-tools; docs/CONFIG.md)
  # workspace_quota     = "1GiB"      # what one session's workspace (state_dir/workspaces/SESSION) may hold
  # workspace_quota_per_uid = "4GiB"  # what all the session workspaces of one uid hold together
  # workspace_quota_total   = "16GiB" # what the session workspaces of every uid hold together (docs/CONFIG.md)
  # store               = "bbolt"     # bbolt (state_dir/state.db, one machine) | etcd (shared by replicas; docs/CONFIG.md)
  # metrics             = "unix:/run/skillbox/metrics.sock"  # Prometheus metrics (off by default): a Unix
                                      # socket (socket_mode, socket_group) or "127.0.0.1:9464"; loopback only (docs/CONFIG.md)
}

# Where replicas (daemon.store = "etcd") share sessions, confirmations,
# proposals and locks.
# store "etcd" {
#   endpoints = ["http://10.0.0.5:2379"]   # the members' client URLs (required)
#   prefix    = "/skillbox"                # keys of this deployment
#   ca_file   = "/etc/skillbox/etcd-ca.pem" # TLS: verify the members
#   cert_file = "/etc/skillbox/etcd.pem"   # TLS: client certificate (with key_file)
#   key_file  = "/etc/skillbox/etcd-key.pem"
# }

skills {
  roots = ["/etc/skillbox/skills"]

  # allow_extensions = false    # accept tags/requires/... in SKILL.md frontmatter
  # catalog_budget   = 16000    # characters of <available_skills> in the prompt
  # max_depth        = 4        # directory levels scanned under each root
  # max_skills       = 50000
  # max_read_bytes   = "1MiB"   # largest skills.read answer
  # catalog_budget_tokens = 4000 # cap <available_skills> in estimated tokens instead
  # lock_file        = "/var/lib/skillbox/skills.lock"  # skillbox skills lock writes it
}

# skills.run_code runs code the caller (the model) wrote, with every active
# skill mounted read-only at /skills/<name>; a tool of its own, decided for
# each active skill (the strictest decision wins). skills.run_code(python)
# matches one language: python, shell or node.
policy "default" {
  skills = ["*"]                         # glob on skill names
  tools  = ["skills.read", "skills.run_script", "skills.run_code"]
}

policy "needs-approval" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script", "skills.run_code"]
}

# A skill body's !`command` lines (rendered by skills.activate and
# `skillbox skills render`) run in a fresh shell sandbox with the skill
# mounted read-only and no network, each decided as the tool
# skills.render_command. No rule above lists it, so they are denied (and
# shown as an error line in the body) until an operator opts in:
# policy "render-commands" {
#   skills  = ["release-notes"]
#   tools   = ["skills.render_command(git log:*)", "skills.render_command(date)"]
#   confirm = ["skills.render_command(git log:*)"]
# }
#
# Hooks (PreToolUse / PostToolUse in a skill's frontmatter) run in the
# sandbox during tools.check and tools.report; they can only narrow policy.
# A hook that fails or hangs counts as deny unless a rule says otherwise.
# A hook is a run of its skill: "./hooks/check.sh" is decided as
# skills.run_script of that file, other shell as skills.run_code too, so
# the confirm and deny above hold for hooks as for the model's own calls.
# Pinned versions: with require_lock, matching skills load and run only at
# a digest recorded by `skillbox skills lock`.
# policy "pinned" {
#   skills       = ["*"]
#   require_lock = true
#   hook_failure = "deny"      # deny | confirm | ignore
#   hook_timeout = "10s"
# }
#
# Network egress: the skill's runs reach only these destinations, through
# skillbox's proxy outside the sandbox (names, "*.domain" wildcards,
# address ranges; always with a port), each connection audited. A rule
# with network = false takes them away. confirm = ["network"] asks an
# approver once per session for the destinations.
# policy "weather" {
#   skills  = ["weather-*"]
#   egress  = ["api.weather.example:443", "*.cdn.example.org:443"]
#   confirm = ["network"]
#   limits {
#     egress_connections = 50
#     egress_bytes_out   = "1MiB"
#   }
# }
#
# A secret the proxy adds to HTTPS requests to its hosts; the sandbox sees
# only a placeholder in $WEATHER_TOKEN.
# secret "WEATHER_TOKEN" {
#   from_env = "WEATHER_TOKEN"         # or from_file = "/etc/skillbox/weather.token"
#   hosts    = ["api.weather.example"]
#   header   = "Authorization: Bearer %s"
# }
#
# egress {
#   hosts_file       = "/etc/skillbox/egress-hosts"  # names the proxy resolves as written
#   upstream_ca_file = "/etc/skillbox/internal-ca.pem"
# }
#
# Workspaces: a run's /work backed by a directory of the user's
# (skillbox run/exec --workdir DIR). Its files are copied in before the run
# and the run's changes applied back after it, each only if the host file
# is still the one the run started from (else a conflict, never an
# overwrite). A host directory is read-only unless a rule sets workspace =
# "write" for it; the strictest mode of the matching rules wins ("none"
# refuses the workspace). workspace_paths (absolute globs, ** for any depth)
# limit a rule to some directories; deletions are applied only with
# workspace_delete = true; workspace_excludes replace the default excludes
# (.git/, .env*, .ssh/, keys, certificates, key stores).
# confirm = ["workspace"] asks an approver before such a run.
# policy "projects" {
#   skills           = ["pdf", "docx"]
#   workspace        = "write"                   # none | read | write
#   workspace_paths  = ["/home/*/projects/**"]
#   workspace_delete = true
# }
#
# Session sandboxes: with isolation = "session" the runs of a session share
# one long-lived sandbox per image (its processes, /tmp, memory and /work
# stay from one call to the next; background runs live on). An idle one is
# checkpointed to disk and restored on the session's next call. Every
# skill a run mounts must be given "session"; a matching rule with
# isolation = "run" (the default: a fresh sandbox per run) wins.
# policy "notebooks" {
#   skills    = ["notebook-*"]
#   isolation = "session"                   # run | session
# }
#
# sessions {
#   idle_timeout      = "10m"    # an idle session sandbox is checkpointed after this ("0": never)
#   checkpoint_budget = "4GiB"   # disk for all checkpoints together (memory images and /work copies)
#   checkpoint_budget_per_session = "2GiB"  # disk for one session's checkpoints
#   checkpoint_budget_per_uid     = "2GiB"  # disk for all checkpoints of one uid's sessions
#   checkpoint_disk_percent       = 50      # share of the store's filesystem for all checkpoints (audit.min_free is kept besides)
#   max_sandboxes     = 16       # live session sandboxes on this daemon
#   background_runs   = 8        # live background runs per session
# }
#
# Agents: sessions.create {agent = "reviewer"} starts with these skills loaded.
# agent "reviewer" {
#   uses_skills = ["code-review"]
# }

# More rules. All rules matching a skill apply together, in any order:
# deny beats confirm beats allow; limits take the strictest value; network is
# on only if some matching rule sets it true and none sets it false;
# script_dirs (unset: any file of the skill may be run) intersect.
#
# policy "git-helpers" {
#   skills  = ["git-*"]
#   tools   = ["Read", "Bash(git:*)", "mcp__github"]
#   deny    = ["Bash(git push:*)"]
#   confirm = ["network"]              # network runs need an approver
#   network = true
#   script_dirs = ["scripts", "core"]  # only files under these may be run
#   limits {
#     timeout = "2m"
#     memory  = "256MiB"
#   }
# }

# runtime "runsc" {
#   binary    = "runsc"
#   state_dir = "/run/skillbox/runsc"
#   platform  = "systrap"              # systrap | ptrace | kvm
#   flags     = ["--overlay2=root:memory"]
# }
# runtime "runc" {
#   binary    = "runc"
#   state_dir = "/run/skillbox/runc"
# }
# runtime "containerd" {
#   address   = "/run/containerd/containerd.sock"
#   namespace = "skillbox"
#   handler   = "io.containerd.runsc.v1"   # gVisor's shim | io.containerd.runc.v2
#   # binary  = "runc"                     # what the runc v2 shim runs: runc, or a runsc (gVisor)
#   # platform, flags: runsc's, as for runtime "runsc"
#   state_dir = "/run/skillbox/containerd" # runsc configs and the shims' runtime state
# }

# images {
#   dir          = "/var/lib/skillbox/images"   # default: <state_dir>/images
#   recipes_dirs = ["/etc/skillbox/recipes"]
# }

# Built in: python (.py → python3), shell (.sh .bash → bash),
# node (.js .mjs .cjs → node). The python image is batteries-included
# (pypdf, openpyxl, python-docx, pandas, matplotlib, reportlab, …; poppler,
# qpdf, pandoc, LibreOffice headless, ffmpeg, git, fonts: about 600 MiB). For
# the small one (Python libraries, poppler and qpdf only: no LibreOffice,
# pandoc, ffmpeg, git), run .py scripts in the python-slim image instead:
# image "python" {
#   recipe = "python-slim"
# }
# Then build it: skillbox images build python-slim
#
# Add or override:
# image "ruby" {
#   extensions  = [".rb"]
#   interpreter = ["ruby"]
#   shebangs    = ["ruby"]
#   recipe      = "ruby"
# }
#
# Or take an image from a registry instead of a recipe (daemon runtime
# "containerd" only: it pulls it on first use):
# image "r" {
#   extensions  = [".r"]
#   interpreter = ["Rscript"]
#   ref         = "registry.example.com/stats/r-base:4.4"
# }

# Defaults for every run; rules can only lower them.
# limits {
#   timeout      = "30s"
#   memory       = "512MiB"
#   pids         = 128
#   cpus         = 1
#   workdir      = "1GiB"      # tmpfs ceilings, allocated as written
#   tmp          = "256MiB"    # /tmp, also $HOME
#   stdout       = "1MiB"
#   stderr       = "1MiB"
#   outputs      = "512MiB"    # all files the script created or changed in /work
#   output_files = 20000
#   output_file_bytes = "256MiB"  # one output file; caps are reported, never silent
# }

# audit {
#   rotate_bytes        = "64MiB"    # or rotate_size
#   rotate_age          = "24h"
#   checkpoint_key      = "/etc/skillbox/audit.key"   # Ed25519 private key (PEM PKCS#8)
#   checkpoint_interval = "1h"
# }

# Dependency layers (skills' requirements.txt, PEP 723 blocks, package.json,
# and the rules' packages blocks) are built from these sources only. Without
# them nothing is fetched, and a skill whose packages its image lacks is told
# which ones and how to provide them. Artifacts are fetched on the host
# without running package code (wheels only; npm with scripts off) and
# installed in an offline sandbox; every sha256 is in the layer's manifest.
# python_index {
#   url        = "https://pypi.org/simple"     # a PEP 503 simple index
#   find_links = ["/srv/wheels"]               # directories (or URLs) of wheels
# }
# npm_registry { url = "https://registry.npmjs.org" }
#
# dependencies {
#   when_not_ready = "wait"    # a run whose layer is building waits ("fail": fails at once)
#   wait_timeout   = "10m"
#   build_on_load  = true      # skills.load starts the build (else: skillbox deps build SKILL)
#   max_layer_bytes = "1GiB"   # an installed layer over this fails its build (checked while unpacking)
# }
#
# In a policy rule: packages an operator adds for the skills it matches, and
# whether sdists / npm install scripts may be built (sandboxed, offline):
#   packages { python = ["python-pptx>=1.0"], npm = ["left-pad@^1.3"] }
#   build_from_source = false
