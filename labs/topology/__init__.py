"""The topology lab: two network namespaces joined by a shaped link, flat ring against hierarchical all-reduce."""
