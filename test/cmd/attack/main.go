// Command attack is what a hostile pod does to the manager's ports, for
// the fair-share tests: it floods the runner API with tokens nobody issued,
// and holds connections open by sending request bodies a byte a second, to
// the runner API (with a runner pod's valid token) or to the webhook (with
// none). It runs until killed; -source binds its connections to another
// address of this host, as a pod has its own.
//
//	attack -target 127.0.0.1:9445 -source 127.0.0.2 -junk-tokens 8
//	attack -target 127.0.0.1:9445 -source 127.0.0.2 -trickle 4 -token-file t -path /api/v1/namespaces/ns/secrets/x
//	attack -target 127.0.0.1:9443 -source 127.0.0.2 -trickle 64 -method POST -path /validate-...
//	attack -target 127.0.0.1:9443 -source 127.0.0.2 -forged-reviews 8 -namespace ns -path /validate-...
package main

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("target", "", "host:port of the manager's port")
	source := flag.String("source", "", "local addresses to send from, comma-separated")
	forgeNS := flag.String("forge-namespace", "", "make the junk tokens look like runner tokens of this namespace")
	junkFile := flag.String("junk-token-file", "", "send this file's token (a real one, of a pod that runs no Job) as the junk, again and again")
	junk := flag.Int("junk-tokens", 0, "goroutines sending requests with made-up tokens")
	trickle := flag.Int("trickle", 0, "connections per token (or in all, without tokens) that send bodies a byte a second")
	tokenFile := flag.String("token-file", "", "file of bearer tokens, one per line, for -trickle")
	path := flag.String("path", "/api/v1/namespaces/default/secrets/x", "the path requests go to")
	method := flag.String("method", http.MethodPut, "the method of -trickle's requests")
	forged := flag.Int("forged-reviews", 0, "goroutines posting AdmissionReviews of TerraformClusters of -namespace with many references, without a client certificate")
	namespace := flag.String("namespace", "default", "the namespace of -forged-reviews' objects")
	flag.Parse()
	dialers := []*net.Dialer{{Timeout: 5 * time.Second}}
	if *source != "" {
		dialers = nil
		for _, addr := range strings.Split(*source, ",") {
			dialers = append(dialers, &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}})
		}
	}
	dialer := dialers[0]
	tlsConfig := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // an attacker checks nothing
	var sent, refused, open atomic.Int64

	fixedJunk := ""
	if *junkFile != "" {
		b, err := os.ReadFile(*junkFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fixedJunk = strings.TrimSpace(string(b))
	}
	for i := range *junk {
		d := dialers[i%len(dialers)]
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: tlsConfig,
			MaxIdleConnsPerHost: 64}}
		go func() {
			var answered sync.Once
			for {
				req, _ := http.NewRequest(http.MethodGet, "https://"+*target+*path, nil)
				token := randomToken()
				if *forgeNS != "" {
					token = forgedRunnerToken(*forgeNS)
				}
				if fixedJunk != "" {
					token = fixedJunk
				}
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := client.Do(req)
				sent.Add(1)
				answered.Do(func() { open.Add(1) })
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		}()
	}

	reviews := [][]byte{forgedReview(*namespace, 200), forgedReview(*namespace, 20000)}
	for i := range *forged {
		d := dialers[i%len(dialers)]
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: tlsConfig}}
		go func() {
			var answered sync.Once
			for n := 0; ; n++ {
				resp, err := client.Post("https://"+*target+*path, "application/json", strings.NewReader(string(reviews[n%len(reviews)])))
				sent.Add(1)
				answered.Do(func() { open.Add(1) })
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}

	tokens := []string{""}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		tokens = strings.Fields(string(b))
	}
	for _, token := range tokens {
		for range *trickle {
			go func() {
				var sending sync.Once
				for {
					slowRequest(dialer, tlsConfig, *method, *target, *path, token, func() { sending.Do(func() { open.Add(1) }) })
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
	}
	// "attacking" once every flooder has had an answer and every slow
	// connection has sent its headers: the tests wait for it.
	for want := int64(*junk + *forged + *trickle*len(tokens)); open.Load() < want; {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("attacking")
	for {
		time.Sleep(5 * time.Second)
		fmt.Printf("junk requests sent %d, refused with 429 %d\n", sent.Load(), refused.Load())
	}
}

// slowRequest sends the headers of a write whose body is 1 MiB, then the
// body a byte a second, until the server closes the connection.
func slowRequest(dialer *net.Dialer, config *tls.Config, method, target, path, token string, sent func()) {
	raw, err := dialer.Dial("tcp", target)
	if err != nil {
		return
	}
	conn := tls.Client(raw, config.Clone())
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		return
	}
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, target, 1<<20)
	if token != "" {
		fmt.Fprintf(w, "Authorization: Bearer %s\r\n", token)
	}
	fmt.Fprint(w, "\r\n{")
	if w.Flush() != nil {
		return
	}
	sent()
	for {
		time.Sleep(time.Second)
		if _, err := conn.Write([]byte(" ")); err != nil {
			return
		}
	}
}

// forgedRunnerToken is shaped as a runner pod's token of namespace ns (the
// claims the API server writes), with a made-up pod and signature.
func forgedRunnerToken(ns string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	claims := map[string]any{"aud": []string{"captf.io/runner"}, "exp": time.Now().Add(time.Hour).Unix(),
		"sub":           "system:serviceaccount:" + ns + ":captf-runner",
		"kubernetes.io": map[string]any{"namespace": ns, "pod": map[string]string{"name": "forged", "uid": randomToken()}}}
	return enc(map[string]string{"alg": "RS256", "kid": "made-up"}) + "." + enc(claims) + "." + randomToken()
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "eyJ" + hex.EncodeToString(b)
}

// forgedReview is an AdmissionReview of a TerraformCluster create whose
// variables come from refs Secrets: each a SubjectAccessReview the webhook
// would ask for.
func forgedReview(namespace string, refs int) []byte {
	var vars []map[string]any
	for i := range refs {
		vars = append(vars, map[string]any{"name": fmt.Sprintf("v%d", i),
			"valueFrom": map[string]any{"secretKeyRef": map[string]string{"name": fmt.Sprintf("s%d", i), "key": "k"}}})
	}
	object := map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
		"metadata": map[string]any{"name": "forged", "namespace": namespace},
		"spec":     map[string]any{"module": map[string]any{"inline": "# nothing"}, "variables": vars}}
	review := map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
		"uid": "forged", "kind": map[string]string{"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "kind": "TerraformCluster"},
		"resource": map[string]string{"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "resource": "terraformclusters"},
		"name":     "forged", "namespace": namespace, "operation": "CREATE",
		"userInfo": map[string]any{"username": "system:serviceaccount:" + namespace + ":forger"},
		"object":   object}}
	b, _ := json.Marshal(review)
	return b
}
