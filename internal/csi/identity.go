// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package csi is the agent's CSI Identity client: GetPluginInfo and Probe over a driver's Unix
// socket, without the gRPC library.
package csi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// IdentityClient makes the two CSI Identity calls the gate needs, GetPluginInfo and Probe, as
// unary gRPC calls (HTTP/2 with length-prefixed protobuf messages) over the driver's Unix socket,
// with net/http's own HTTP/2 client.
// The gRPC library would link some forty packages into a binary that runs on every node, for
// two calls whose requests are empty and whose answers the gate reads one field of.
type IdentityClient struct {
	transport *http.Transport
	client    *http.Client
}

// Code is a gRPC status code; only the ones the gate tells apart are named.
type Code int

// The gRPC status codes a caller tells apart, with gRPC's numbers and names.
const (
	Canceled         Code = 1
	Unknown          Code = 2
	DeadlineExceeded Code = 4
	Unimplemented    Code = 12
	Internal         Code = 13
	Unavailable      Code = 14
)

// RPCError is a call that the driver, or the HTTP/2 layer in front of it, answered with a
// non-OK gRPC status.
type RPCError struct {
	Code    Code
	Message string
}

// Error formats the status as the gRPC library does.
func (e *RPCError) Error() string {
	return fmt.Sprintf("rpc error: code = %d desc = %s", e.Code, e.Message)
}

// maxMessage bounds an answer; a CSI Identity answer is a few hundred bytes.
const maxMessage = 1 << 20

// NewIdentityClient returns a client of the driver listening on the Unix socket at path; it
// connects at its first call, and again after a call fails.
func NewIdentityClient(path string) *IdentityClient {
	// gRPC on a Unix socket speaks HTTP/2 without TLS, from the first byte.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	t := &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		// A driver that restarted on a new socket leaves a dead connection behind: health pings
		// find it, and the next call dials the path again.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 2 * time.Second},
	}
	return &IdentityClient{transport: t, client: &http.Client{Transport: t}}
}

// GetPluginInfo returns the driver's name (GetPluginInfoResponse field 1).
func (c *IdentityClient) GetPluginInfo(ctx context.Context) (string, error) {
	msg, err := c.call(ctx, "/csi.v1.Identity/GetPluginInfo")
	if err != nil {
		return "", err
	}
	return pluginName(msg)
}

func pluginName(msg []byte) (string, error) {
	var name string
	err := protoFields(msg, func(num protowire.Number, typ protowire.Type, value []byte) {
		if num == 1 && typ == protowire.BytesType {
			name = string(value)
		}
	})
	return name, err
}

// Probe returns the driver's readiness (ProbeResponse field 1, a google.protobuf.BoolValue):
// nil when the driver left it unset, which the CSI spec reads as ready.
func (c *IdentityClient) Probe(ctx context.Context) (*bool, error) {
	msg, err := c.call(ctx, "/csi.v1.Identity/Probe")
	if err != nil {
		return nil, err
	}
	return readiness(msg)
}

func readiness(msg []byte) (*bool, error) {
	var ready *bool
	var inner error
	err := protoFields(msg, func(num protowire.Number, typ protowire.Type, boolValue []byte) {
		if num != 1 || typ != protowire.BytesType {
			return
		}
		value := false // an empty BoolValue is false
		ready = &value
		inner = protoFields(boolValue, func(num protowire.Number, typ protowire.Type, v []byte) {
			if num == 1 && typ == protowire.VarintType {
				n, _ := protowire.ConsumeVarint(v)
				value = n != 0
			}
		})
	})
	if err = errors.Join(err, inner); err != nil {
		return nil, err
	}
	return ready, nil
}

// call sends an empty request message to method and returns the answer's message.
func (c *IdentityClient) call(ctx context.Context, method string) ([]byte, error) {
	// One uncompressed message of length zero.
	body := []byte{0, 0, 0, 0, 0}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://csi"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if deadline, ok := ctx.Deadline(); ok {
		// The driver stops working on the call when the gate stops waiting.
		req.Header.Set("Grpc-Timeout", strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10)+"m")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, &RPCError{Code: httpStatusCode(resp.StatusCode), Message: "HTTP status " + resp.Status}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage+5))
	if err != nil {
		return nil, err
	}
	// The status is in the trailers, or in the headers of an answer without a body.
	status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" {
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return nil, &RPCError{Code: Internal, Message: fmt.Sprintf("no gRPC status in the answer to %s", method)}
	}
	if code != 0 {
		text, _ := url.PathUnescape(message)
		return nil, &RPCError{Code: Code(code), Message: text}
	}
	if len(data) < 5 || data[0] != 0 {
		return nil, &RPCError{Code: Internal, Message: fmt.Sprintf("the answer to %s is not one uncompressed message", method)}
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if n > maxMessage || int(n) != len(data)-5 {
		return nil, &RPCError{Code: Internal, Message: fmt.Sprintf("the answer to %s has a malformed length", method)}
	}
	return data[5:], nil
}

// httpStatusCode maps an HTTP status to the gRPC code gRPC clients give it.
func httpStatusCode(status int) Code {
	switch status {
	case http.StatusBadRequest:
		return Internal
	case http.StatusNotFound:
		return Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Unavailable
	}
	return Unknown
}

// protoFields calls f with each field of a protobuf message, in order.
func protoFields(msg []byte, f func(num protowire.Number, typ protowire.Type, value []byte)) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errors.New("malformed protobuf message")
		}
		msg = msg[n:]
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return errors.New("malformed protobuf message")
		}
		value := msg[:m]
		if typ == protowire.BytesType {
			value, _ = protowire.ConsumeBytes(value)
		}
		f(num, typ, value)
		msg = msg[m:]
	}
	return nil
}

// Close drops the connection to the driver.
func (c *IdentityClient) Close() {
	c.transport.CloseIdleConnections()
}
