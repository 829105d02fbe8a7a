def handler(request)
    return 1
