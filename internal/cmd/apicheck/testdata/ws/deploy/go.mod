module example.com/ws/deploy

go 1.26.0
