module example.com/ws/internal/harness

go 1.26.0
