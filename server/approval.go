package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcp-forge/forge/runtime/build"
)

// askPerson asks the person behind the request's MCP client a yes-or-no
// question through elicitation (an empty form: accept, decline or cancel).
// An error wrapping build.ErrCannotAsk means the client cannot be asked;
// forge checks the capability itself rather than sending a request the
// client would have to reject.
func (s *Server) askPerson(ctx context.Context, message string) (mcp.ElicitationResponseAction, error) {
	sess := mcpserver.ClientSessionFromContext(ctx)
	if sess == nil {
		return "", fmt.Errorf("%w: the request has no MCP session", build.ErrCannotAsk)
	}
	if ci, ok := sess.(mcpserver.SessionWithClientInfo); ok && ci.GetClientCapabilities().Elicitation == nil {
		return "", fmt.Errorf("%w: the client did not declare the elicitation capability", build.ErrCannotAsk)
	}
	res, err := s.mcp.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
		Message:         message,
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
	}})
	switch {
	case errors.Is(err, mcpserver.ErrElicitationNotSupported), errors.Is(err, mcpserver.ErrNoActiveSession),
		errors.Is(err, mcpserver.ErrServerInitiatedRequestUnsupported):
		return "", fmt.Errorf("%w: %w", build.ErrCannotAsk, err)
	case err != nil:
		return "", err
	}
	switch res.Action {
	case mcp.ElicitationResponseActionAccept, mcp.ElicitationResponseActionDecline, mcp.ElicitationResponseActionCancel:
		return res.Action, nil
	}
	// The client's answer is untrusted: anything else is no approval.
	return mcp.ElicitationResponseActionDecline, nil
}

// elicitApprover is the build.Approver of an MCP request: it asks the
// person through the client (environment_builder.approval: elicit).
type elicitApprover struct{ s *Server }

func (a elicitApprover) ApproveBuild(ctx context.Context, ap build.Approval) (build.Decision, error) {
	msg := fmt.Sprintf("Approve installing %s into the environment %q (%s)? %s the approval patterns of environment_builder.approval_packages (%s). "+
		"The build installs: %s. Your approval holds for this build only.",
		strings.Join(ap.Packages, ", "), ap.Environment, ap.Image, plural(len(ap.Packages), "It matches", "They match"),
		strings.Join(ap.Patterns, ", "), strings.Join(ap.Requested, " "))
	act, err := a.s.askPerson(ctx, msg)
	if err != nil {
		return build.Decision{}, err
	}
	return build.Decision{Approved: act == mcp.ElicitationResponseActionAccept, Action: string(act), By: clientName(ctx)}, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
