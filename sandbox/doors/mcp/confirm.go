package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// approveField is the one field of the approval form.
const approveField = "approve"

// elicitKey names the approval in a multi-round-trip tool call.
const elicitKey = "skillbox_confirmation"

// askConfirmation turns a confirmation_required refusal into a request for
// the user's answer (MCP elicitation), when that is allowed and the client
// supports form elicitation; otherwise it returns nil and the refusal stays
// a tool error naming the confirmation id. The SDK asks the client and
// calls the tool again with the answer (elicitationAnswer). A tools_check
// whose hooks are held names every held hook's confirmation
// (confirmation_ids); one answer approves them all, since the call runs
// them all.
func (c *Conn) askConfirmation(ctx context.Context, req *sdk.CallToolRequest, tool string, err error) *sdk.CallToolResult {
	var cr *api.ConfirmationRequiredError
	if !c.s.opts.ElicitApprovals || !errors.As(err, &cr) || cr.Pending || !supportsFormElicitation(req) {
		return nil
	}
	ids := confirmationIDs(err, cr.ID)
	c.elicitMu.Lock()
	for _, id := range ids {
		c.elicitTable[id] = tool
	}
	c.elicitMu.Unlock()
	return &sdk.CallToolResult{
		InputRequests: sdk.InputRequestMap{elicitKey: &sdk.ElicitParams{
			Mode:    "form",
			Message: c.confirmationMessage(ctx, cr, ids, tool),
			RequestedSchema: &jsonschema.Schema{
				Type: "object",
				Properties: map[string]*jsonschema.Schema{
					approveField: {Type: "boolean", Title: "Approve this run", Description: "Run it exactly as shown, once."},
				},
				Required: []string{approveField},
			},
		}},
		// Only echoed back; elicitationAnswer accepts ids this connection asked about.
		RequestState: strings.Join(ids, ","),
	}
}

// confirmationIDs are the confirmations err names: its confirmation_ids
// (held hooks; a []any when it came through the daemon's JSON) or first.
func confirmationIDs(err error, first string) []string {
	var ids []string
	switch v := api.ErrorData(err)["confirmation_ids"].(type) {
	case []string:
		ids = v
	case []any:
		for _, x := range v {
			if id, ok := x.(string); ok && id != "" {
				ids = append(ids, id)
			}
		}
	}
	if !slices.Contains(ids, first) {
		ids = append([]string{first}, ids...)
	}
	return ids
}

func supportsFormElicitation(req *sdk.CallToolRequest) bool {
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	e := caps.Elicitation
	return e.Form != nil || e.URL == nil // an empty object means form
}

// confirmationMessage is what the user is asked: what would run, why it
// needs approval, and the digest the answer binds to.
func (c *Conn) confirmationMessage(ctx context.Context, cr *api.ConfirmationRequiredError, ids []string, tool string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "skillbox: %s needs your approval: %s (policy rule %s).", tool, cr.Reason, cr.Rule)
	if len(ids) > 1 {
		fmt.Fprintf(&b, "\n%d hooks wait for approval (confirmations %s); approving runs each once.", len(ids), strings.Join(ids, ", "))
	}
	if list, err := c.s.svc.ListConfirmations(ctx, c.caller, api.ListConfirmationsParams{SessionID: c.session}); err == nil {
		for _, conf := range list.Confirmations {
			if !slices.Contains(ids, conf.ID) {
				continue
			}
			if len(ids) > 1 {
				fmt.Fprintf(&b, "\n%s:", conf.ID)
			}
			for _, k := range slices.Sorted(maps.Keys(conf.Details)) {
				v := conf.Details[k]
				if k == api.DetailLockDiff {
					// A prompt is no place for a diff of up to 64 KiB.
					v = fmt.Sprintf("a diff of %d lines against the locked version; read it in `skillbox console` or confirmations.list (confirmation %s)", strings.Count(v, "\n"), conf.ID)
				}
				fmt.Fprintf(&b, "\n%s: %s", k, v)
			}
		}
	}
	fmt.Fprintf(&b, "\nApproving allows this exact request (digest %s) to run once.", cr.Digest)
	return b.String()
}

// elicitationAnswer handles the retry of a tool call that asked the user to
// confirm: it approves (or denies) the confirmations as the caller, through
// the service, and returns their ids for the repeated call. answered is
// false for an ordinary call.
func (c *Conn) elicitationAnswer(ctx context.Context, req *sdk.CallToolRequest, tool string) (ids []string, answered bool, err error) {
	if len(req.Params.InputResponses) == 0 {
		return nil, false, nil
	}
	ids = strings.Split(req.Params.RequestState, ",")
	c.elicitMu.Lock()
	ok := true
	for _, id := range ids {
		if c.elicitTable[id] != tool {
			ok = false
		}
	}
	if ok {
		for _, id := range ids {
			delete(c.elicitTable, id)
		}
	}
	c.elicitMu.Unlock()
	if !ok {
		return nil, true, errors.New("invalid_params: this answer is not for a confirmation this connection asked about; repeat the call without it")
	}
	resp, _ := req.Params.InputResponses[elicitKey].(*sdk.ElicitResult)
	if resp == nil || resp.Action != "accept" || resp.Content[approveField] != true {
		action := "declined"
		if resp != nil && resp.Action == "cancel" {
			action = "dismissed"
		}
		msg := fmt.Sprintf("denied: the user %s the run at the client", action)
		for _, id := range ids {
			if _, derr := c.s.svc.DenyConfirmation(ctx, c.caller, api.ConfirmationIDParams{ID: id}); derr == nil {
				msg += fmt.Sprintf("; confirmation %s is denied", id)
			} else {
				msg += fmt.Sprintf("; confirmation %s stays pending for an approver (%v)", id, derr)
			}
		}
		return nil, true, errors.New(msg + "; do not retry it unless the user asks")
	}
	for _, id := range ids {
		if _, err := c.s.svc.ApproveConfirmation(ctx, c.caller, api.ConfirmationIDParams{ID: id}); err != nil {
			return nil, true, fmt.Errorf("%w; the user's answer could not approve it: ask an approver to approve confirmation %s (confirmations.approve), then repeat the call with confirmation_id %q", toolError(err), id, id)
		}
	}
	return ids, true, nil
}
