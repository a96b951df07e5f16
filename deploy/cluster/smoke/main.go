// hello: the smoke test's server and client in one static binary.
//
//	hello              serve on :8080, log each request
//	hello get URL      GET URL, print the body (the client image has no shell or curl)
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "get" {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer resp.Body.Close()
		io.Copy(os.Stdout, resp.Body)
		if resp.StatusCode != http.StatusOK {
			os.Exit(1)
		}
		return
	}
	host, _ := os.Hostname()
	start := time.Now()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s from %s", r.Method, r.URL.Path, r.RemoteAddr)
		fmt.Fprintf(w, "hello from %s (up %s)\n", host, time.Since(start).Round(time.Second))
	})
	log.Printf("listening on :8080 as uid %d", os.Getuid())
	log.Fatal(http.ListenAndServe(":8080", nil))
}
