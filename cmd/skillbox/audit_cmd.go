package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/audit/siem"
)

// auditCommand is `skillbox audit`: the security team's view of the audit
// log — check it has not been tampered with, watch it, search it, hand it to
// a SIEM, and make the checkpoint signing key.
func auditCommand() *cli.Command {
	dirFlag := &cli.StringFlag{Name: "dir", Value: audit.DefaultDir, Usage: "audit log `DIR`", EnvVars: []string{"SKILLBOX_AUDIT_DIR"}}
	return &cli.Command{
		Name:  "audit",
		Usage: "verify, tail, query and export the tamper-evident audit log",
		Subcommands: []*cli.Command{
			{
				Name:  "verify",
				Usage: "check the hash chain (and signed checkpoints) of each replica; exit 1 naming each chain's first bad seq",
				Flags: []cli.Flag{
					dirFlag,
					&cli.StringFlag{Name: "pubkey", Usage: "public key `FILE` to check checkpoint signatures"},
					&cli.StringFlag{Name: "checkpoints", Usage: "checkpoints `FILE` kept apart from the log (needs --pubkey); detects a cut-off or rewritten log"},
					&cli.BoolFlag{Name: "partial", Usage: "accept a log whose earliest files were removed by retention"},
					&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
				},
				Action: auditVerify,
			},
			{
				Name:  "tail",
				Usage: "show the last records; -f follows new ones across rotation",
				Flags: []cli.Flag{
					dirFlag,
					&cli.IntFlag{Name: "n", Value: 10, Usage: "show the last `N` records"},
					&cli.BoolFlag{Name: "f", Aliases: []string{"follow"}, Usage: "keep printing records as they are written"},
					&cli.BoolFlag{Name: "json", Usage: "print the records' JSON lines as stored"},
				},
				Action: auditTail,
			},
			{
				Name:  "query",
				Usage: "list records matching filters as a table (or JSON lines)",
				Flags: append([]cli.Flag{dirFlag}, append(filterFlags(),
					&cli.BoolFlag{Name: "json", Usage: "print the records' JSON lines as stored"})...),
				Action: auditQuery,
			},
			{
				Name: "export",
				Usage: "write records for a SIEM as JSON lines: flat (json), OCSF " + siem.OCSFVersion + " (ocsf) or ECS " + siem.ECSVersion +
					" (ecs); all replicas' chains merged by time, or with -f one chain's new records as they are written",
				Flags: append([]cli.Flag{dirFlag}, append(filterFlags(),
					&cli.StringFlag{Name: "format", Value: string(siem.FormatJSON), Usage: "`FORMAT` of the records: json (flat), ocsf (OCSF " + siem.OCSFVersion + "), ecs (ECS " + siem.ECSVersion + ")"},
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout (with -f: appended, fsynced per record, reopened when rotated away)"},
					&cli.StringFlag{Name: "syslog", Usage: "send each record as one RFC 5424 message to `ADDR`: unixgram:PATH (or PATH), udp:HOST:PORT or tcp:HOST:PORT on loopback"},
					&cli.BoolFlag{Name: "f", Aliases: []string{"follow"}, Usage: "keep writing records as they are written, across rotation, until interrupted (one chain, as audit tail -f)"},
					&cli.IntFlag{Name: "n", Usage: "with -f: start with the last `N` records (default: only new ones)"})...),
				Action: auditExport,
			},
			{
				Name:      "keygen",
				Usage:     "make an Ed25519 checkpoint signing key: FILE (private) and FILE.pub (public)",
				ArgsUsage: "FILE",
				Action:    auditKeygen,
			},
		},
	}
}

func filterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "replica", Usage: "only records written by replica `NAME`"},
		&cli.StringFlag{Name: "session", Usage: "only session `ID`"},
		&cli.StringFlag{Name: "skill", Usage: "only records about skill `NAME`"},
		&cli.StringFlag{Name: "event", Usage: "only `EVENT`s: exact (run.end), family (run), glob (confirmation.*), comma-separated"},
		&cli.StringFlag{Name: "since", Usage: "from `T`: RFC 3339 time, date (2006-01-02) or age (90m, 24h, 7d)"},
		&cli.StringFlag{Name: "until", Usage: "before `T` (same forms as --since)"},
		&cli.StringFlag{Name: "uid", Usage: "only callers with `UID`"},
	}
}

func auditVerify(c *cli.Context) error {
	if c.NArg() > 0 {
		return exitCode(2, "usage: audit verify takes no arguments (did you mean --dir %s?)", c.Args().First())
	}
	dir := c.String("dir")
	var opts audit.VerifyOptions
	opts.Partial = c.Bool("partial")
	if p := c.String("pubkey"); p != "" {
		k, err := audit.LoadPublicKey(p)
		if err != nil {
			return exitCode(2, "--pubkey: %v", err)
		}
		opts.PublicKey = k
	}
	if p := c.String("checkpoints"); p != "" {
		if opts.PublicKey == nil {
			return exitCode(2, "--checkpoints needs --pubkey: a checkpoint is only worth its signature")
		}
		opts.Checkpoints = p
	}
	results, err := audit.VerifyAll(dir, opts)
	var te *audit.TamperError
	if err != nil && !errors.As(err, &te) {
		if errors.Is(err, audit.ErrNoLog) {
			return exitCode(1, "%v (is --dir right?)", err)
		}
		return exitCode(1, "verifying %s: %v", dir, err)
	}
	out := c.App.Writer
	if len(results) == 1 && results[0].Name == "" && te == nil {
		// One chain in the directory itself: one machine, as before replicas.
		r := results[0]
		if r.Err != nil {
			return exitCode(1, "verifying %s: %v", dir, r.Err)
		}
		if c.Bool("json") {
			writeVerifyJSON(out, r.Report, r.Failure)
		} else {
			printReport(out, r.Report, r.Failure, opts)
		}
		if r.Failure != nil {
			return exitCode(1, "audit log %s is NOT intact: first bad seq %d: %s", dir, r.Failure.Seq, clean(r.Failure.Finding()))
		}
		return nil
	}
	if c.Bool("json") {
		writeChainsJSON(out, dir, results, te)
	} else {
		printChains(out, dir, results, te, opts)
	}
	var bad []string
	for _, r := range results {
		switch {
		case r.Err != nil:
			bad = append(bad, fmt.Sprintf("chain %s: not checked: %v", r.Label(), r.Err))
		case r.Failure != nil:
			bad = append(bad, fmt.Sprintf("chain %s: first bad seq %d: %s", r.Label(), r.Failure.Seq, clean(r.Failure.Finding())))
		}
	}
	if te != nil {
		bad = append(bad, clean(te.Finding()))
	}
	if len(bad) > 0 {
		return exitCode(1, "audit log %s is NOT intact:\n  %s", dir, strings.Join(bad, "\n  "))
	}
	return nil
}

func writeVerifyJSON(w io.Writer, rep *audit.Report, te *audit.TamperError) {
	v := struct {
		OK      bool               `json:"ok"`
		Report  *audit.Report      `json:"report"`
		Failure *audit.TamperError `json:"failure,omitempty"`
	}{te == nil, rep, te}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeChainsJSON is --json for a directory of several chains (replicas).
func writeChainsJSON(w io.Writer, dir string, results []audit.ChainResult, te *audit.TamperError) {
	type chain struct {
		audit.ChainResult
		OK    bool   `json:"ok"`
		Error string `json:"error,omitempty"`
	}
	v := struct {
		OK      bool               `json:"ok"`
		Dir     string             `json:"dir"`
		Chains  []chain            `json:"chains"`
		Failure *audit.TamperError `json:"failure,omitempty"`
	}{OK: te == nil, Dir: dir, Failure: te}
	for _, r := range results {
		ch := chain{ChainResult: r, OK: r.OK()}
		if r.Err != nil {
			ch.Error = r.Err.Error()
		}
		v.OK = v.OK && ch.OK
		v.Chains = append(v.Chains, ch)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// printChains reports each chain of a directory of replicas' chains, then a
// table of them all.
func printChains(w io.Writer, dir string, results []audit.ChainResult, te *audit.TamperError, opts audit.VerifyOptions) {
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "audit log %s: not checked: %v\n\n", r.Dir, r.Err)
			continue
		}
		printReport(w, r.Report, r.Failure, opts)
		fmt.Fprintln(w)
	}
	intact := 0
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHAIN\tREPLICA\tRECORDS\tHEAD\tSTATE")
	for _, r := range results {
		replica, records, head, state := "-", "-", "-", "intact"
		if rep := r.Report; rep != nil {
			if len(rep.Replicas) > 0 {
				replica = strings.Join(rep.Replicas, ",")
			}
			records = strconv.FormatUint(rep.Records, 10)
			if rep.Head != "" {
				head = rep.Head[:min(16, len(rep.Head))]
			}
		}
		switch {
		case r.Err != nil:
			state = "not checked: " + clean(r.Err.Error())
		case r.Failure != nil:
			state = fmt.Sprintf("NOT intact: first bad seq %d: %s", r.Failure.Seq, clean(r.Failure.Finding()))
		default:
			intact++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", clean(r.Label()), replica, records, head, state)
	}
	tw.Flush()
	fmt.Fprintf(w, "%s: %d chain(s), %d intact\n", dir, len(results), intact)
	if te != nil {
		fmt.Fprintf(w, "checkpoints: %s\n", clean(te.Finding()))
	}
}

func printReport(w io.Writer, rep *audit.Report, te *audit.TamperError, opts audit.VerifyOptions) {
	if rep == nil {
		return
	}
	state := "intact"
	if te != nil {
		state = "NOT intact; before the first bad record:"
	}
	fmt.Fprintf(w, "audit log %s: %s\n", rep.Dir, state)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  log id\t%s\n", rep.LogID)
	if len(rep.Replicas) > 0 {
		fmt.Fprintf(tw, "  replica\t%s", rep.Replicas[0])
		if len(rep.Replicas) > 1 {
			fmt.Fprintf(tw, " (renamed later: %s)", strings.Join(rep.Replicas[1:], ", "))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "  records\t%d (seq %d to %d) in %d file(s)", rep.Records, rep.FirstSeq, rep.LastSeq, len(rep.Files))
	if len(rep.Files) > 0 {
		fmt.Fprintf(tw, ": %s", rep.Files[0])
		if len(rep.Files) > 1 {
			fmt.Fprintf(tw, " … %s", rep.Files[len(rep.Files)-1])
		}
	}
	fmt.Fprintln(tw)
	if rep.Records > 0 {
		fmt.Fprintf(tw, "  time\t%s to %s\n", fmtTime(rep.FirstTime), fmtTime(rep.LastTime))
		fmt.Fprintf(tw, "  head\t%s\n", rep.Head)
	}
	if rep.Partial {
		fmt.Fprintf(tw, "  partial\tthe chain starts at seq %d: earlier files were removed (accepted with --partial)\n", rep.FirstSeq)
	}
	sig := "signatures verified"
	if !rep.SignaturesChecked {
		sig = "signatures not checked: give --pubkey"
	}
	fmt.Fprintf(tw, "  checkpoints\t%d in the log (%s)", rep.LogCheckpoints, sig)
	if opts.Checkpoints != "" {
		fmt.Fprintf(tw, "; %d from %s matched", rep.FileCheckpoints, opts.Checkpoints)
		if rep.SkippedCheckpoints > 0 {
			fmt.Fprintf(tw, " (%d before the partial log's start skipped)", rep.SkippedCheckpoints)
		}
	} else {
		fmt.Fprintf(tw, "; a cut-off tail is only detectable with --checkpoints")
	}
	fmt.Fprintln(tw)
	for _, r := range rep.Recoveries {
		fmt.Fprintf(tw, "  recovery\tseq %d: the writer dropped a torn line of %d bytes at %s offset %d (sha256 %s)\n",
			r.Seq, r.Bytes, clean(r.File), r.Offset, r.SHA256)
	}
	if rep.Outages > 0 {
		fmt.Fprintf(tw, "  outages\t%d (the log could not be written for a while and runs were refused; see 'audit query --event audit.resumed')\n", rep.Outages)
	}
	if rep.TornTail > 0 {
		fmt.Fprintf(tw, "  note\tthe last line is incomplete (%d bytes): a write in progress, or a crash the writer records when it next opens the log\n", rep.TornTail)
	}
	tw.Flush()
}

func auditTail(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := c.App.Writer
	asJSON := c.Bool("json")
	if !asJSON {
		fmt.Fprintln(out, tailRow(tableHeader()))
	}
	err := audit.Tail(ctx, c.String("dir"), audit.TailOptions{N: c.Int("n"), Follow: c.Bool("f")}, func(e *audit.Entry) error {
		if asJSON {
			fmt.Fprintf(out, "%s\n", e.Raw)
		} else {
			fmt.Fprintln(out, tailRow(recordRow(e.Record)))
		}
		return nil
	})
	if err != nil {
		return exitCode(1, "audit tail: %v", err)
	}
	return nil
}

func auditQuery(c *cli.Context) error {
	f, err := parseFilter(c)
	if err != nil {
		return err
	}
	out := c.App.Writer
	asJSON := c.Bool("json")
	// Several chains (replicas) are merged by time; a column says whose
	// each record is.
	chains, err := audit.Chains(c.String("dir"))
	if err != nil {
		return exitCode(1, "audit query: %v", err)
	}
	multi := len(chains) > 1
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !asJSON {
		h := tableHeader()
		if multi {
			h = append(h[:1:1], append([]string{"REPLICA"}, h[1:]...)...)
		}
		fmt.Fprintln(tw, strings.Join(h, "\t"))
	}
	n := 0
	err = audit.Scan(c.String("dir"), func(e *audit.Entry) error {
		if !f.Match(e.Record) {
			return nil
		}
		n++
		if asJSON {
			_, err := fmt.Fprintf(out, "%s\n", e.Raw)
			return err
		}
		row := recordRow(e.Record)
		if multi {
			row = append(row[:1:1], append([]string{orDash(clean(e.Record.Replica))}, row[1:]...)...)
		}
		_, err := fmt.Fprintln(tw, strings.Join(row, "\t"))
		return err
	})
	tw.Flush()
	if err != nil {
		return exitCode(1, "audit query: %v", err)
	}
	if !asJSON {
		fmt.Fprintf(c.App.ErrWriter, "%d record(s)\n", n)
	}
	return nil
}

func auditExport(c *cli.Context) error {
	f, err := parseFilter(c)
	if err != nil {
		return err
	}
	mapper, err := siem.NewMapper(siem.Format(c.String("format")), version)
	if err != nil {
		return exitCode(2, "--format: %v", err)
	}
	follow := c.Bool("f")
	if c.IsSet("n") && !follow {
		return exitCode(2, "-n needs -f: without it every record that passes the filters is exported")
	}
	sink, err := siem.OpenSink(siem.Destination{Output: c.String("output"), Syslog: c.String("syslog"), Stdout: c.App.Writer, Append: follow})
	if err != nil {
		if de := (*siem.DestinationError)(nil); errors.As(err, &de) {
			return exitCode(2, "audit export: %v", err)
		}
		return exitCode(1, "audit export: %v", err)
	}
	var n int
	if follow {
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		n, err = siem.Follow(ctx, c.String("dir"), c.Int("n"), f, mapper, sink)
	} else {
		n, err = siem.Export(c.String("dir"), f, mapper, sink)
	}
	if cerr := sink.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return exitCode(1, "audit export: %d record(s) written, then: %v", n, err)
	}
	fmt.Fprintf(c.App.ErrWriter, "exported %d record(s) as %s; run 'skillbox audit verify' to vouch for them\n", n, mapper.Format().Schema())
	return nil
}

func auditKeygen(c *cli.Context) error {
	if c.NArg() != 1 {
		return exitCode(2, "usage: skillbox audit keygen FILE (writes FILE and FILE.pub)")
	}
	p := c.Args().First()
	pub, err := audit.GenerateKey(p)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return exitCode(1, "audit keygen: %v: refusing to overwrite a key; pick another FILE", err)
		}
		return exitCode(1, "audit keygen: %v", err)
	}
	fmt.Fprintf(c.App.Writer, "wrote %s (private: give its path to the daemon, keep it 0600) and %s.pub (public: give it to whoever verifies)\nkey id %s\n",
		p, p, audit.KeyID(pub))
	return nil
}

func parseFilter(c *cli.Context) (audit.Filter, error) {
	f, err := audit.ParseFilter(c.String, time.Now())
	var fe *audit.FilterError
	if errors.As(err, &fe) {
		return f, exitCode(2, "--%s: %v", fe.Field, fe.Err)
	}
	return f, err
}

func tableHeader() []string {
	return []string{"TIME", "SEQ", "EVENT", "UID", "SESSION", "SKILL", "OUTCOME"}
}

// recordRow is one table row. Every field is cleaned: the values come from
// callers and scripts, and must not move the cursor or fake a row.
func recordRow(r *audit.Record) []string {
	uid := "-"
	if r.Peer != nil {
		uid = strconv.FormatUint(uint64(r.Peer.UID), 10)
	}
	skill := strings.Join(r.SkillNames(), ",")
	if r.Run != nil && r.Run.Script != "" {
		if skill == "" {
			skill = "-"
		}
		skill += ":" + r.Run.Script
	}
	outcome := r.Summary()
	if len(outcome) > 160 {
		outcome = outcome[:160] + "…"
	}
	return []string{fmtTime(r.Time), strconv.FormatUint(r.Seq, 10), clean(r.Event), uid,
		orDash(clean(r.SessionID)), orDash(clean(skill)), orDash(clean(outcome))}
}

// tailRow lays a row out in fixed columns, so rows printed one at a time
// (tail -f) still line up.
func tailRow(c []string) string {
	return fmt.Sprintf("%-30s %8s  %-22s %6s  %-18s %-24s %s", c[0], c[1], c[2], c[3], c[4], c[5], c[6])
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clean makes untrusted text safe to print on a terminal: anything that is
// not a printable character (newlines, escapes, U+2028, bidi controls, …)
// is shown as a Go escape, so no value can start a new row or recolor one.
func clean(s string) string {
	for _, r := range s {
		if r == '\t' || !unicode.IsPrint(r) && r != ' ' {
			q := strconv.QuoteToGraphic(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}
