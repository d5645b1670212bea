module example.com/ws/examples

go 1.26.0
