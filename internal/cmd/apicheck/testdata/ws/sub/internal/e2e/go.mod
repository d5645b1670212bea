module example.com/ws/sub/internal/e2e

go 1.26.0
