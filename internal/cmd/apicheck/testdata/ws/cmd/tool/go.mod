module example.com/ws/cmd/tool

go 1.26.0
