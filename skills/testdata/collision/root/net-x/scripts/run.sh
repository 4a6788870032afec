echo real net-x
