// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package metricsauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// apiServer answers reviews as a real one would for two tokens: "reader" may get /metrics,
// "stranger" may not; any other token is not authenticated.
type apiServer struct {
	tokenReviews, accessReviews int
	fail                        bool
}

func (a *apiServer) guard(clk *clocktesting.FakeClock) *Guard {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.tokenReviews++
		if a.fail {
			return true, nil, errors.New("the API server is away")
		}
		review := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch review.Spec.Token {
		case "reader", "stranger":
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:" + review.Spec.Token, Groups: []string{"system:serviceaccounts"}}}
		}
		return true, review, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.accessReviews++
		review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		attrs := review.Spec.NonResourceAttributes
		review.Status.Allowed = review.Spec.User == "system:serviceaccount:monitoring:reader" &&
			attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get"
		return true, review, nil
	})
	return &Guard{TokenReviews: cs.AuthenticationV1().TokenReviews(), AccessReviews: cs.AuthorizationV1().SubjectAccessReviews(), Clock: clk}
}

func serve(t *testing.T, h http.Handler, header string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func TestTheGuardAnswers401403And200AndCachesTheAPIServersAnswers(t *testing.T) {
	api := &apiServer{}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	h, err := api.guard(clk).Filter(logr.Discard(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		header string
		want   int
	}{
		{"", http.StatusUnauthorized},
		{"Basic cmVhZGVyOng=", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer forged", http.StatusUnauthorized},
		{"Bearer stranger", http.StatusForbidden},
		{"Bearer reader", http.StatusOK},
		{"bearer reader", http.StatusOK},
	} {
		if got := serve(t, h, tt.header); got != tt.want {
			t.Errorf("Authorization %q: %d, want %d", tt.header, got, tt.want)
		}
	}
	if api.tokenReviews != 3 || api.accessReviews != 2 {
		t.Fatalf("%d token and %d access reviews; want 3 (forged, stranger, reader) and 2", api.tokenReviews, api.accessReviews)
	}

	// Within the lifetimes, scrapes cost the API server nothing; a denial is asked again sooner.
	for range 10 {
		serve(t, h, "Bearer reader")
		serve(t, h, "Bearer stranger")
	}
	if api.tokenReviews != 3 || api.accessReviews != 2 {
		t.Fatalf("cached answers were asked again: %d token and %d access reviews", api.tokenReviews, api.accessReviews)
	}
	clk.Step(deniedTTL)
	serve(t, h, "Bearer stranger")
	if api.accessReviews != 3 {
		t.Fatalf("a denial was kept past %s", deniedTTL)
	}
	clk.Step(authenticatedTTL)
	serve(t, h, "Bearer reader")
	if api.tokenReviews != 4 {
		t.Fatalf("an authentication was kept past %s", authenticatedTTL)
	}

	// An API server that cannot answer is the guard's error, not the scraper's.
	api.fail = true
	if got := serve(t, h, "Bearer new"); got != http.StatusInternalServerError {
		t.Fatalf("review failed: %d, want 500", got)
	}
}

func TestTheCacheIsBounded(t *testing.T) {
	var c cache[bool]
	now := time.Now()
	for i := range 3 * maxEntries {
		c.put(string(rune(i)), true, now.Add(time.Hour))
	}
	if len(c.entries) > maxEntries {
		t.Fatalf("%d entries, want at most %d", len(c.entries), maxEntries)
	}
}
