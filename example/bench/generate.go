package main

//go:generate go tool idemgen generate
