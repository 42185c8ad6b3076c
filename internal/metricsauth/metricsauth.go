// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package metricsauth guards the metrics endpoint as controller-runtime's
// filters.WithAuthenticationAndAuthorization does: the bearer token must pass a TokenReview (401
// otherwise), and its user a SubjectAccessReview for the request's verb on its path (403
// otherwise). It uses client-go alone. controller-runtime's filter builds on k8s.io/apiserver,
// which links cel-go and OpenTelemetry into the binary, and every node pays for their pages and
// package init.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The caches' lifetimes, as controller-runtime's filter has them: a scrape every few seconds
// costs the API server one review per minute, and a revoked permission takes effect within 5 min.
const (
	authenticatedTTL = time.Minute
	allowedTTL       = 5 * time.Minute
	deniedTTL        = 30 * time.Second
	reviewTimeout    = 10 * time.Second
	// maxEntries bounds each cache; a scraper uses one token and one path.
	maxEntries = 256
)

// Provider is a metricsserver.Options.FilterProvider.
func Provider(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the TokenReview client: %w", err)
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the SubjectAccessReview client: %w", err)
	}
	g := &Guard{TokenReviews: authn.TokenReviews(), AccessReviews: authz.SubjectAccessReviews(), Clock: clock.RealClock{}}
	return g.Filter, nil
}

// Guard authenticates and authorizes requests through the API server, caching its answers.
type Guard struct {
	TokenReviews  authenticationclient.TokenReviewInterface
	AccessReviews authorizationclient.SubjectAccessReviewInterface
	Clock         clock.PassiveClock

	users     cache[authenticationv1.UserInfo]
	decisions cache[bool]
}

// Filter implements metricsserver.Filter.
func (g *Guard) Filter(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearerToken(req)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
		defer cancel()
		user, ok, err := g.authenticate(ctx, token)
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			log.V(4).Info("Authentication failed")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := g.authorize(ctx, user, strings.ToLower(req.Method), req.URL.Path)
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
			log.V(4).Info(msg)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req)
	}), nil
}

// bearerToken reads the token of an "Authorization: Bearer TOKEN" header.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "bearer") && token != ""
}

// authenticate asks a TokenReview who token is, unless a recent answer is cached. Only
// successful reviews are cached, so a token that becomes valid works at once.
func (g *Guard) authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(token)))
	if user, ok := g.users.get(key, g.Clock.Now()); ok {
		return user, true, nil
	}
	review, err := g.TokenReviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}},
		metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, fmt.Errorf("reviewing the token: %w", err)
	}
	if !review.Status.Authenticated {
		return authenticationv1.UserInfo{}, false, nil
	}
	g.users.put(key, review.Status.User, g.Clock.Now().Add(authenticatedTTL))
	return review.Status.User, true, nil
}

// authorize asks a SubjectAccessReview whether user may verb path, unless a recent answer is cached.
func (g *Guard) authorize(ctx context.Context, user authenticationv1.UserInfo, verb, path string) (bool, error) {
	key := fmt.Sprintf("%q %q %q %q %q %v", verb, path, user.Username, user.UID, user.Groups, user.Extra)
	if allowed, ok := g.decisions.get(key, g.Clock.Now()); ok {
		return allowed, nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	review, err := g.AccessReviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing access of %s: %w", user.Username, err)
	}
	ttl := deniedTTL
	if review.Status.Allowed {
		ttl = allowedTTL
	}
	g.decisions.put(key, review.Status.Allowed, g.Clock.Now().Add(ttl))
	return review.Status.Allowed, nil
}

// cache holds answers until they expire. It is bounded: when full, it starts over.
type cache[V any] struct {
	mu      sync.Mutex
	entries map[string]entry[V]
}

type entry[V any] struct {
	value   V
	expires time.Time
}

func (c *cache[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

func (c *cache[V]) put(key string, value V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxEntries {
		c.entries = map[string]entry[V]{}
	}
	c.entries[key] = entry[V]{value: value, expires: expires}
}
