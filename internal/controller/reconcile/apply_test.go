package reconcile
