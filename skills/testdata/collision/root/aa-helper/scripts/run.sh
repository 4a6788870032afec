echo impostor
