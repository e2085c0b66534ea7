// Command gitserver serves the bare repositories under $GIT_PROJECT_ROOT
// over git's smart HTTP (git http-backend) on :8080, to clients that give
// $GIT_USER and $GIT_PASSWORD: the git server of the end-to-end tests.
package main

import (
	"cmp"
	"log"
	"net/http"
	"net/http/cgi" //nolint:gosec // Go's own CGI host, long since safe from httpoxy
	"os"
	"time"
)

func main() {
	root := cmp.Or(os.Getenv("GIT_PROJECT_ROOT"), "/srv/git")
	user, password := os.Getenv("GIT_USER"), os.Getenv("GIT_PASSWORD")
	execPath := cmp.Or(os.Getenv("GIT_EXEC_PATH"), "/usr/lib/git-core")
	backend := &cgi.Handler{
		Path: execPath + "/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=" + user,
			"PATH=" + execPath + ":/bin", "HOME=/tmp"},
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != password {
			log.Printf("%q %q: refused", r.Method, r.URL.String()) //nolint:gosec // quoted
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		log.Printf("%q %q", r.Method, r.URL.String()) //nolint:gosec // quoted
		backend.ServeHTTP(w, r)
	})
	log.Printf("serving %q on :8080", root) //nolint:gosec // quoted
	srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
