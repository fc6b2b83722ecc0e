package auth

import "errors"

var (
	// ErrNoToken: the request carries no Authorization header.
	ErrNoToken = errors.New("no bearer token")
	// ErrBadToken: the token is malformed, unknown or revoked.
	ErrBadToken = errors.New("invalid bearer token")
	// ErrNoTokens: the server knows no token, so it accepts none.
	ErrNoTokens = errors.New("this forge has no bearer token configured, so it serves no HTTP request")
	// ErrTokenNotFound: no stored token has that id.
	ErrTokenNotFound = errors.New("no such token")
	// ErrStore: the token file is unreadable or corrupt.
	ErrStore = errors.New("token store")
)
