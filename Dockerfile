# syntax=docker/dockerfile:1
# One build stage compiles every binary; each service's image is a target
# that copies only its own binary onto a distroless, non-root base.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries: the runtime image has no libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/...

# distroless/static has CA certificates and tzdata, no shell, no package
# manager; the :nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
USER nonroot:nonroot

FROM runtime AS checkout
COPY --from=build /out/checkout /usr/local/bin/checkout
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/checkout"]

FROM runtime AS worker
COPY --from=build /out/worker /usr/local/bin/worker
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/worker"]

FROM runtime AS paymentsim
COPY --from=build /out/paymentsim /usr/local/bin/paymentsim
EXPOSE 8082
ENTRYPOINT ["/usr/local/bin/paymentsim"]

FROM runtime AS catalogsim
COPY --from=build /out/catalogsim /usr/local/bin/catalogsim
EXPOSE 8083
ENTRYPOINT ["/usr/local/bin/catalogsim"]

# The development issuer: compose demo only, never production (it signs a
# token for any customer anyone asks for).
FROM runtime AS devissuer
COPY --from=build /out/devissuer /usr/local/bin/devissuer
EXPOSE 8084
ENTRYPOINT ["/usr/local/bin/devissuer"]
