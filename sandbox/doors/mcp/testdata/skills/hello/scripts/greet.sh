#!/bin/sh
echo "hello, ${1:-world}"
