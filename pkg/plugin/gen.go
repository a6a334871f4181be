package plugin

// Regenerate pkg/plugin/pb from proto/plugin.proto (needs protoc, protoc-gen-go
// and protoc-gen-go-grpc on PATH).
//go:generate protoc --proto_path=proto --go_out=pb --go_opt=paths=source_relative --go-grpc_out=pb --go-grpc_opt=paths=source_relative plugin.proto
