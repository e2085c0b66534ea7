// Package baseurl reads the LLM endpoints of the judge: a Loop's
// spec.llm.baseURL and the operator's allow-list (--llm-allowed-base-urls).
//
// A base URL is compared as the server that receives it would read it, so
// a Loop cannot name a path that reads as under an allowed one and reaches
// another: what a server or proxy may rewrite (dot segments, encoded
// slashes and backslashes, empty segments, double encoding) is refused, as
// are a user, a query and a fragment; the scheme and host compare without
// case, a default port as none, and the path segment by segment.
package baseurl

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// URL is a base URL in its normal form.
type URL struct {
	scheme, host string
	// segments of the path, decoded; none for "/" or "".
	segments []string
}

// Parse reads a base URL, or says why it is refused.
func Parse(s string) (URL, error) {
	if strings.ContainsAny(s, `\?#`) {
		return URL{}, errors.New("must have no backslash, query or fragment")
	}
	if l := strings.ToLower(s); strings.Contains(l, "%2f") || strings.Contains(l, "%5c") || strings.Contains(l, "%25") {
		return URL{}, errors.New("must not encode a slash, a backslash or a percent sign")
	}
	u, err := url.Parse(s)
	if err != nil {
		return URL{}, errors.New("is not a URL")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return URL{}, errors.New("must be an http or https URL")
	}
	if u.Opaque != "" || u.Host == "" {
		return URL{}, errors.New("must name a host (http://HOST/PATH)")
	}
	if u.User != nil {
		return URL{}, errors.New("must have no user or password")
	}
	host, err := normalHost(scheme, u)
	if err != nil {
		return URL{}, err
	}
	segments, err := pathSegments(u.EscapedPath())
	if err != nil {
		return URL{}, err
	}
	return URL{scheme: scheme, host: host, segments: segments}, nil
}

// normalHost is the host in lower case, without a trailing dot, and with
// its port unless it is the scheme's default.
func normalHost(scheme string, u *url.URL) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if name == "" || strings.ContainsAny(name, "%/") {
		return "", errors.New("must name a host (http://HOST/PATH)")
	}
	if strings.Contains(name, ":") {
		name = "[" + name + "]" // IPv6
	}
	port := u.Port()
	if port == "" {
		return name, nil
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", fmt.Errorf("port %q is not a port", port)
	}
	if scheme == "http" && n == 80 || scheme == "https" && n == 443 {
		return name, nil
	}
	return name + ":" + strconv.FormatUint(n, 10), nil
}

// pathSegments splits an escaped path into its decoded segments, refusing
// those a server may read differently than they are written.
func pathSegments(escaped string) ([]string, error) {
	p := strings.TrimSuffix(strings.TrimPrefix(escaped, "/"), "/")
	if p == "" {
		return nil, nil
	}
	raw := strings.Split(p, "/")
	segments := make([]string, 0, len(raw))
	for _, r := range raw {
		s, err := url.PathUnescape(r)
		switch {
		case err != nil:
			return nil, fmt.Errorf("path segment %q is not valid percent-encoding", r)
		case s == "":
			return nil, errors.New("path must have no empty segment (//)")
		case isDots(s):
			return nil, fmt.Errorf("path must have no dot segment (%q)", r)
		case strings.ContainsAny(s, `/\%`):
			return nil, fmt.Errorf("path segment %q must not encode a slash, a backslash or a percent sign", r)
		case strings.ContainsFunc(s, func(c rune) bool { return c < 0x20 || c == 0x7f }):
			return nil, fmt.Errorf("path segment %q must not encode a control character", r)
		}
		segments = append(segments, s)
	}
	return segments, nil
}

// isDots reports whether a decoded segment is "." or "..", also with path
// parameters (";x"), which some servers drop.
func isDots(s string) bool {
	s, _, _ = strings.Cut(s, ";")
	return s == "." || s == ".."
}

// Under reports whether u is at or under base: the same scheme and host,
// and base's path segments first.
func (u URL) Under(base URL) bool {
	if u.scheme != base.scheme || u.host != base.host || len(u.segments) < len(base.segments) {
		return false
	}
	for i, s := range base.segments {
		if u.segments[i] != s {
			return false
		}
	}
	return true
}

// Allowed reports whether the base URL s is at or under one of allowed;
// err says why s itself is refused. An allowed URL that Parse refuses
// allows nothing.
func Allowed(s string, allowed []string) (bool, error) {
	u, err := Parse(s)
	if err != nil {
		return false, err
	}
	for _, a := range allowed {
		if base, err := Parse(a); err == nil && u.Under(base) {
			return true, nil
		}
	}
	return false, nil
}
