namespace replayssm {}
