"""What people see: the overview page and the operator values. Above ``fleet``."""
