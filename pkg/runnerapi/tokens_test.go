package runnerapi

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/captf/captf/pkg/names"
)

// signer signs tokens as an API server's issuer does.
type signer struct {
	kid string
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
}

func newSigners(t *testing.T, kidPrefix string) (rsaSigner, ecSigner signer, jwks []byte) {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	doc := map[string]any{"keys": []map[string]string{
		{"kid": kidPrefix + "rsa", "kty": "RSA", "alg": "RS256", "use": "sig", "n": b64(rk.N.Bytes()), "e": b64(big.NewInt(int64(rk.E)).Bytes())},
		{"kid": kidPrefix + "ec", "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "x": b64(ek.X.FillBytes(make([]byte, 32))), "y": b64(ek.Y.FillBytes(make([]byte, 32)))},
	}}
	jwks, _ = json.Marshal(doc)
	return signer{kid: kidPrefix + "rsa", rsa: rk}, signer{kid: kidPrefix + "ec", ec: ek}, jwks
}

// token is a runner token of namespace ns, changed by change, signed.
func (s signer) token(t *testing.T, ns string, change func(claims map[string]any)) string {
	t.Helper()
	claims := map[string]any{"aud": []string{"https://kubernetes.default.svc", names.RunnerTokenAudience}, "exp": time.Now().Add(time.Hour).Unix(),
		"nbf": time.Now().Unix(), "sub": "system:serviceaccount:" + ns + ":" + names.RunnerServiceAccount,
		"kubernetes.io": map[string]any{"namespace": ns, "pod": map[string]string{"name": "p", "uid": "uid-pod"}}}
	if change != nil {
		change(claims)
	}
	alg := "RS256"
	if s.ec != nil {
		alg = "ES256"
	}
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": alg, "kid": s.kid}) + "." + enc(claims)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	var err error
	if s.ec != nil {
		var r, ss *big.Int
		r, ss, err = ecdsa.Sign(rand.Reader, s.ec, sum[:])
		sig = append(r.FillBytes(make([]byte, 32)), ss.FillBytes(make([]byte, 32))...)
	} else {
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.rsa, crypto.SHA256, sum[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestClaimedNamespace: what passes before a TokenReview is a pod-bound
// token of captf-runner with CAPTF's audience, not expired, signed by a
// key of the API server's (RSA or P-256); forged claims, junk and
// another audience do not. Without the keys, the claims alone are
// checked, and said unverified.
func TestClaimedNamespace(t *testing.T) {
	rs, es, jwks := newSigners(t, "1-")
	other, _, _ := newSigners(t, "1-")
	forged := rs.token(t, "victim", nil)
	forged = forged[:len(forged)-4] + "AAAA" // the signature changed
	for _, tc := range []struct {
		name         string
		token        string
		noKeys       bool
		wantNS       string
		wantVerified bool
	}{
		{name: "RSA-signed runner token", token: rs.token(t, "ns", nil), wantNS: "ns", wantVerified: true},
		{name: "P-256-signed runner token", token: es.token(t, "ns", nil), wantNS: "ns", wantVerified: true},
		{name: "audience a string", token: rs.token(t, "ns", func(c map[string]any) { c["aud"] = names.RunnerTokenAudience }), wantNS: "ns", wantVerified: true},
		{name: "not a JWT", token: "eyJ0123456789abcdef"},
		{name: "another audience", token: rs.token(t, "ns", func(c map[string]any) { c["aud"] = []string{"https://kubernetes.default.svc"} })},
		{name: "another ServiceAccount of the namespace (spec.jobs.serviceAccountName)", token: rs.token(t, "ns", func(c map[string]any) { c["sub"] = "system:serviceaccount:ns:cloud-runner" }),
			wantNS: "ns", wantVerified: true},
		{name: "not a ServiceAccount", token: rs.token(t, "ns", func(c map[string]any) { c["sub"] = "alice" })},
		{name: "subject of another namespace", token: rs.token(t, "ns", func(c map[string]any) { c["sub"] = "system:serviceaccount:victim:captf-runner" })},
		{name: "bound to no pod", token: rs.token(t, "ns", func(c map[string]any) { c["kubernetes.io"] = map[string]any{"namespace": "ns"} })},
		{name: "expired", token: rs.token(t, "ns", func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() })},
		{name: "signature forged", token: forged},
		{name: "signed by another key of the same ID", token: other.token(t, "ns", nil)},
		{name: "signed by an unknown key", token: signer{kid: "nobody", rsa: other.rsa}.token(t, "ns", nil)},
		{name: "forged, keys not readable", token: forged, noKeys: true, wantNS: "victim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := &issuerKeys{now: time.Now, fetch: func(context.Context) ([]byte, error) { return jwks, nil }}
			if tc.noKeys {
				keys.fetch = noJWKS
			}
			ns, verified, err := claimedNamespace(context.Background(), tc.token, time.Now(), keys)
			if tc.wantNS == "" {
				if err == nil || !errors.Is(err, errNotARunnerToken) {
					t.Errorf("claimedNamespace = %q, %v; want it refused", ns, err)
				}
				return
			}
			if err != nil || ns != tc.wantNS || verified != tc.wantVerified {
				t.Errorf("claimedNamespace = %q, verified %v, %v; want %q, verified %v", ns, verified, err, tc.wantNS, tc.wantVerified)
			}
		})
	}
}

// TestUnknownKeyIDsReadTheKeysSeldom: made-up key IDs make the manager read
// the issuer's keys again at most every refetchAfter; a rotated key is
// found once that has passed.
func TestUnknownKeyIDsReadTheKeysSeldom(t *testing.T) {
	rs, _, jwks := newSigners(t, "1-")
	now := time.Now()
	reads := 0
	keys := &issuerKeys{now: func() time.Time { return now }, fetch: func(context.Context) ([]byte, error) { reads++; return jwks, nil }}
	for i := range 100 {
		tok := signer{kid: fmt.Sprintf("made-up-%d", i), rsa: rs.rsa}.token(t, "ns", nil)
		if _, _, err := claimedNamespace(context.Background(), tok, now, keys); err == nil {
			t.Fatal("a token of a made-up key ID passed")
		}
	}
	if reads != 1 {
		t.Errorf("100 made-up key IDs read the keys %d times, want 1", reads)
	}
	rotated, _, newJWKS := newSigners(t, "2-")
	jwks = newJWKS
	tok := rotated.token(t, "ns", nil)
	if _, _, err := claimedNamespace(context.Background(), tok, now, keys); err == nil {
		t.Error("a new key was trusted before the keys were read again")
	}
	now = now.Add(refetchAfter + time.Second)
	if ns, verified, err := claimedNamespace(context.Background(), tok, now, keys); err != nil || !verified || ns != "ns" {
		t.Errorf("the rotated key, read again: %q %v %v", ns, verified, err)
	}
}

// TestForgedClaimsSpendNoBudget: with the issuer's keys read, tokens that
// claim the victim's namespace but that its issuer did not sign are
// refused before any budget (401, no TokenReview), from however many
// addresses; a flood of signed tokens of the attacker's own namespace
// spends that namespace's budget, not the victim's, whose new token is
// reviewed.
func TestForgedClaimsSpendNoBudget(t *testing.T) {
	rs, _, jwks := newSigners(t, "1-")
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer api.Close()
	victim := rs.token(t, "ns", nil)
	kube := fakeRunnerPodWithToken(victim)
	reviews := 0
	kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		return false, nil, nil // counted, then answered by the fake's own
	})
	s := &Server{Kube: kube, Config: &rest.Config{Host: api.URL}, JWKS: func(context.Context) ([]byte, error) { return jwks, nil }}
	send := func(source, token string) int {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets/tfc-prod-state", nil)
		req.RemoteAddr = source + ":40000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	forged := victim[:len(victim)-4] + "AAAA"
	evil := rs.token(t, "evil", nil)
	forgedCodes, evilCodes := map[int]int{}, map[int]int{}
	for i := range 400 { // from 20 addresses each, past every budget
		forgedCodes[send(fmt.Sprintf("10.0.1.%d", i%20), forged)]++
		evilCodes[send(fmt.Sprintf("10.0.2.%d", i%20), evil)]++
	}
	if forgedCodes[http.StatusUnauthorized] != 400 {
		t.Errorf("forged claims of the victim's namespace: %v, want 401 each", forgedCodes)
	}
	if evilCodes[http.StatusTooManyRequests] == 0 || evilCodes[http.StatusUnauthorized] > nsReviewBurst+nsReviewQPS {
		t.Errorf("signed tokens of the attacker's namespace: %v, want 401 up to its namespace's burst, then 429", evilCodes)
	}
	if reviews > nsReviewBurst+nsReviewQPS {
		t.Errorf("%d TokenReviews for the floods, want at most the attacker's namespace's budget", reviews)
	}
	if code := send("10.0.3.1", victim); code != http.StatusOK {
		t.Errorf("the victim's new token: %d, want 200", code)
	}
	// A key the API server did not list when its keys were last read (a
	// rotation, or made up): come back later, no review.
	before := reviews
	if code := send("10.0.3.2", signer{kid: "rotated-in", rsa: rs.rsa}.token(t, "ns", nil)); code != http.StatusTooManyRequests || reviews != before {
		t.Errorf("a token of a key not listed yet: %d after %d reviews, want 429 and none", code, reviews-before)
	}
}
