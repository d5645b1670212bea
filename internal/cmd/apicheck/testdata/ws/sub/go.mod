module example.com/ws/sub

go 1.26.0
