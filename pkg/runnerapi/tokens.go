package runnerapi

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/names"
)

// A token the runner API has not seen is checked here before it spends any
// budget of TokenReviews: it must be a ServiceAccount token of the CAPTF
// audience, of a ServiceAccount of its namespace, bound to a pod, not
// expired, and signed by a key of the API server's issuer (when the
// manager can read them). Junk, and tokens forged to claim another
// namespace, are refused at once; what passes spends the budget of the
// namespace it names, so one namespace's flood costs no other its runs.

// runnerClaims are the claims of a runner's token that are checked before
// a TokenReview.
type runnerClaims struct {
	Audience  audience `json:"aud"`
	Expiry    int64    `json:"exp"`
	NotBefore int64    `json:"nbf"`
	Subject   string   `json:"sub"`
	// Kubernetes is what the API server says of a ServiceAccount token.
	Kubernetes struct {
		Namespace string `json:"namespace"`
		Pod       *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// audience is a JWT's aud: a string or a list of them.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		return json.Unmarshal(b, (*[]string)(a))
	}
	var one string
	if err := json.Unmarshal(b, &one); err != nil {
		return err
	}
	*a = []string{one}
	return nil
}

// jwtHeader is a JWT's header.
type jwtHeader struct {
	Algorithm string `json:"alg"`
	KeyID     string `json:"kid"`
}

// errNotARunnerToken is the answer to a token that cannot be a runner's.
var errNotARunnerToken = errors.New("not a runner token")

// errKeyNotKnown: the token names a signing key the API server did not
// list when its keys were last read (made up, or a key rotated in since,
// which the next read finds): the runner is told to come back.
var errKeyNotKnown = errors.New("signed with a key the API server did not list")

// claimedNamespace says which namespace token is a runner's token of, and
// whether its signature said so (the issuer's keys could be read), or why
// it cannot be one.
func claimedNamespace(ctx context.Context, token string, now time.Time, keys *issuerKeys) (ns string, verified bool, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false, fmt.Errorf("%w: not a JWT", errNotARunnerToken)
	}
	var header jwtHeader
	var claims runnerClaims
	if err := decodeSegment(parts[0], &header); err != nil {
		return "", false, fmt.Errorf("%w: header: %v", errNotARunnerToken, err)
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", false, fmt.Errorf("%w: claims: %v", errNotARunnerToken, err)
	}
	ns = claims.Kubernetes.Namespace
	switch {
	case !slices.Contains(claims.Audience, names.RunnerTokenAudience):
		return "", false, fmt.Errorf("%w: audience %v", errNotARunnerToken, claims.Audience)
	// Any ServiceAccount of the namespace: a runner may run as one of
	// spec.jobs.serviceAccountName (workload identity).
	case ns == "" || !strings.HasPrefix(claims.Subject, "system:serviceaccount:"+ns+":") || strings.Count(claims.Subject, ":") != 3:
		return "", false, fmt.Errorf("%w: subject %q", errNotARunnerToken, claims.Subject)
	case claims.Kubernetes.Pod == nil || claims.Kubernetes.Pod.Name == "" || claims.Kubernetes.Pod.UID == "":
		return "", false, fmt.Errorf("%w: bound to no pod", errNotARunnerToken)
	case claims.Expiry == 0 || now.Unix() >= claims.Expiry:
		return "", false, fmt.Errorf("%w: expired", errNotARunnerToken)
	case claims.NotBefore != 0 && now.Unix()+60 < claims.NotBefore: // a minute of clock skew
		return "", false, fmt.Errorf("%w: not valid yet", errNotARunnerToken)
	}
	if keys != nil {
		if verified, err = keys.verify(ctx, header, parts[0]+"."+parts[1], parts[2]); err != nil {
			return "", false, fmt.Errorf("%w: %w", errNotARunnerToken, err)
		}
	}
	return ns, verified, nil
}

func decodeSegment(seg string, into any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// issuerKeys are the public keys the API server signs ServiceAccount tokens
// with, read from its discovery document (/openid/v1/jwks, which every
// ServiceAccount may read by default). Until they could be read once,
// signatures are not checked: the TokenReview still is.
type issuerKeys struct {
	// fetch reads the JWKS document.
	fetch func(ctx context.Context) ([]byte, error)
	now   func() time.Time

	mu      sync.Mutex
	keys    map[string]crypto.PublicKey // by key ID
	fetched time.Time                   // last attempt
	loaded  bool                        // read once at least
	warned  bool
}

// refetchAfter bounds how often an unknown key ID makes the manager read the
// keys again: made-up key IDs must not make it read them for each.
const refetchAfter = 30 * time.Second

// verify checks signature (base64url) of signed against the key header
// names; a key ID not known reads the keys again, at most every
// refetchAfter. While they were never read, nothing is checked (false).
func (k *issuerKeys) verify(ctx context.Context, header jwtHeader, signed, signature string) (checked bool, err error) {
	key, checked := k.key(ctx, header.KeyID)
	if !checked {
		return false, nil
	}
	if key == nil {
		return true, fmt.Errorf("%w: %q", errKeyNotKnown, header.KeyID)
	}
	sig, err := base64.RawURLEncoding.DecodeString(signature)
	if err != nil {
		return true, fmt.Errorf("signature: %v", err)
	}
	sum := sha256.Sum256([]byte(signed))
	switch pub := key.(type) {
	case *rsa.PublicKey:
		if header.Algorithm != "RS256" || rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil {
			return true, errors.New("bad signature")
		}
	case *ecdsa.PublicKey:
		if header.Algorithm != "ES256" || len(sig) != 64 ||
			!ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return true, errors.New("bad signature")
		}
	default:
		return true, fmt.Errorf("key %q of an algorithm not checked", header.KeyID)
	}
	return true, nil
}

// key is the key of id, and whether keys are checked at all (false while
// they could never be read).
func (k *issuerKeys) key(ctx context.Context, id string) (crypto.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.keys[id]; ok {
		return key, true
	}
	now := k.now()
	if !k.fetched.IsZero() && now.Sub(k.fetched) < refetchAfter {
		return nil, k.loaded
	}
	k.fetched = now
	keys, err := k.read(ctx)
	if err != nil {
		if !k.warned {
			k.warned = true
			klog.FromContext(ctx).WithName("runner-api").Info("Cannot read the API server's token signing keys: tokens are checked by TokenReview alone", "err", err)
		}
		return nil, k.loaded
	}
	k.keys, k.loaded, k.warned = keys, true, false
	return k.keys[id], true
}

// read reads and parses the JWKS document.
func (k *issuerKeys) read(ctx context.Context) (map[string]crypto.PublicKey, error) {
	b, err := k.fetch(ctx)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Keys []struct {
			Kid, Kty, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	keys := map[string]crypto.PublicKey{}
	for _, j := range doc.Keys {
		num := func(s string) *big.Int {
			b, _ := base64.RawURLEncoding.DecodeString(s)
			return new(big.Int).SetBytes(b)
		}
		switch {
		case j.Kty == "RSA" && j.N != "" && j.E != "":
			keys[j.Kid] = &rsa.PublicKey{N: num(j.N), E: int(num(j.E).Int64())}
		case j.Kty == "EC" && j.Crv == "P-256":
			keys[j.Kid] = &ecdsa.PublicKey{Curve: elliptic.P256(), X: num(j.X), Y: num(j.Y)}
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("the issuer's JWKS document has no RSA or P-256 key")
	}
	return keys, nil
}

// fetchJWKS reads the API server's JWKS document with client.
func fetchJWKS(client *http.Client, host string) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/openid/v1/jwks", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /openid/v1/jwks: %s", resp.Status)
		}
		return b, nil
	}
}
