#!/bin/sh
echo "something broke" >&2
exit 3
