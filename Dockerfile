# The looprun image: the operator (/manager), the model gateway (/gateway,
# the same image run with another command), the in-Pod wrapper
# (/entrypoint, which every action Pod's init container copies) and the CLI
# (/usr/local/bin/looprun), all static, on distroless, as a non-root user.
# Nothing may live at /looprun: action Pods mount their tools there.
#
#   docker build -t ghcr.io/looprun/looprun:dev .                      # operator
#   docker build --target entrypoint -t ghcr.io/looprun/entrypoint:dev .  # wrapper only
#
# test/image checks that these build commands produce the binaries copied
# below, statically linked.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# What looprun version prints: docker build --build-arg VERSION=0.1.0 --build-arg GIT_COMMIT=$(git rev-parse --short HEAD)
ARG VERSION=dev
ARG GIT_COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/entrypoint ./cmd/entrypoint
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w -X github.com/looprun/looprun/internal/version.Version=${VERSION} -X github.com/looprun/looprun/internal/version.GitCommit=${GIT_COMMIT}" -o /out/looprun ./cmd/looprun

# The wrapper alone, for clusters that pull a small image into every action Pod.
FROM gcr.io/distroless/static-debian12:nonroot AS entrypoint
COPY --from=build /out/entrypoint /entrypoint
USER 65532:65532
ENTRYPOINT ["/entrypoint"]

# The operator (the default target).
FROM gcr.io/distroless/static-debian12:nonroot AS manager
COPY --from=build /out/manager /manager
COPY --from=build /out/gateway /gateway
COPY --from=build /out/entrypoint /entrypoint
COPY --from=build /out/looprun /usr/local/bin/looprun
USER 65532:65532
ENTRYPOINT ["/manager"]
