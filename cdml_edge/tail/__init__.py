"""``cdml-edge tail``: follow an appliance from outside it."""
